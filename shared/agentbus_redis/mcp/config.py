"""Claude Code's ``.mcp.json``: which MCP servers a tool worker connects to (pure: text in, models out).

The file is ``{"mcpServers": {NAME: SERVER}}``. A SERVER is stdio (``command``, ``args``, ``env``; ``type``
``"stdio"`` or absent) or streamable HTTP (``type: "http"``, ``url``, ``headers``). Strings in ``command``,
``args``, ``env``, ``url`` and ``headers`` may name environment variables as Claude Code expands them:
``${VAR}`` (an error when unset) and ``${VAR:-default}``. agentbus' own options sit under the extra key
``"agentbus"``, which Claude Code ignores: ``perSession`` (a connection per session instead of one per worker),
``required`` (the worker is not ready while the server is down) and, for a stdio server, ``sandbox``: ``true``
(run it under the tool worker's bubblewrap sandbox, as Bash commands run, with no network), an object (the
same, with ``allowedDomains`` / ``deniedDomains`` it may reach through the worker's proxy — within the
deployment's allow-list — and ``readOnlyPaths`` it needs mounted, such as its virtualenv), or ``false`` (run
it bare even where the deployment sandboxes stdio servers by default, ``AGENTBUS_TOOLS__MCP_SANDBOX``).
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Annotated, Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Discriminator,
    Field,
    StrictBool,
    Tag,
    ValidationError,
    field_validator,
    model_validator,
)

from agentbus_redis.confinement.network import checked_domain_patterns
from agentbus_redis.errors import AgentbusError

SERVER_NAME = re.compile(r"^[A-Za-z0-9_-]+$")
_VARIABLE = re.compile(r"\$\{([^}:]+)(?::-([^}]*))?\}")


class McpConfigError(AgentbusError):
    """A ``.mcp.json`` that cannot be used; the message names the file and the place in it."""


class MissingVariables(ValueError):
    """``${VAR}`` names a variable that is not set and has no ``:-default``."""

    def __init__(self, names: list[str]) -> None:
        self.names = names
        super().__init__(f"environment variable(s) not set: {', '.join(names)}")


def expand_variables(text: str, env: Mapping[str, str]) -> str:
    """``${VAR}`` → its value, ``${VAR:-default}`` → its value or ``default`` when unset (Claude Code's rule);
    raises :class:`MissingVariables` naming every unset variable without a default."""
    missing: list[str] = []

    def replace(match: re.Match[str]) -> str:
        name, default = match.group(1), match.group(2)
        value = env.get(name)
        if value is not None:
            return value
        if default is not None:
            return default
        missing.append(name)
        return match.group(0)

    expanded = _VARIABLE.sub(replace, text)
    if missing:
        raise MissingVariables(missing)
    return expanded


class McpSandboxOptions(BaseModel):
    """``"sandbox": {...}`` of a stdio server's ``"agentbus"`` key (``"sandbox": true`` is all defaults)."""

    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)

    allowed_domains: list[str] = Field(default_factory=list, alias="allowedDomains")
    """What the server may reach through the worker's proxy (the deployment's pattern syntax), each entry one
    the deployment's allow-list allows; empty: no network."""
    denied_domains: list[str] = Field(default_factory=list, alias="deniedDomains")
    """Refused besides what the deployment denies."""
    read_only_paths: list[str] = Field(default_factory=list, alias="readOnlyPaths")
    """Absolute paths mounted read-only besides the system (the server's virtualenv, its interpreter's
    prefix, its package directory); never the tools root or a directory holding it."""

    @field_validator("allowed_domains", "denied_domains")
    @classmethod
    def _patterns_parse(cls, patterns: list[str]) -> list[str]:
        return checked_domain_patterns(patterns)

    @field_validator("read_only_paths")
    @classmethod
    def _absolute(cls, paths: list[str]) -> list[str]:
        if bad := [path for path in paths if not path.startswith("/") or "\0" in path]:
            raise ValueError(f"must be absolute paths: {', '.join(map(repr, bad))}")
        return paths


def _sandbox_kind(value: Any) -> str:
    if value is None:
        return "default"
    return "options" if isinstance(value, dict | McpSandboxOptions) else "switch"


SandboxChoice = Annotated[
    Annotated[StrictBool, Tag("switch")]
    | Annotated[McpSandboxOptions, Tag("options")]
    | Annotated[None, Tag("default")],
    Discriminator(
        _sandbox_kind,
        custom_error_type="mcp_sandbox",
        custom_error_message="sandbox must be true, false or an object (allowedDomains, deniedDomains, readOnlyPaths)",
    ),
]


class AgentbusServerOptions(BaseModel):
    """The ``"agentbus"`` key of a server entry."""

    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=True)

    per_session: bool = Field(default=False, alias="perSession")
    """A connection (for stdio: a process, started in the session's workspace) per session, not one per worker."""
    required: bool = False
    """``/readyz`` of the worker fails while this server is not connected."""
    sandbox: SandboxChoice = None
    """A stdio server only: run it under the tool worker's sandbox (``true`` or the options), or bare
    (``false``); None: as the deployment says (``AGENTBUS_TOOLS__MCP_SANDBOX``)."""


class _Server(BaseModel):
    model_config = ConfigDict(extra="allow", frozen=True)

    agentbus: AgentbusServerOptions = AgentbusServerOptions()


class StdioServer(_Server):
    """A server the worker starts as a process and talks to over its stdin/stdout."""

    type: Literal["stdio"] = "stdio"
    command: str = Field(min_length=1)
    args: list[str] = Field(default_factory=list)
    env: dict[str, str] = Field(default_factory=dict)
    """The server's whole environment besides a minimal PATH/HOME/USER/SHELL/TERM (never the worker's)."""


class HttpServer(_Server):
    """A server reached over streamable HTTP."""

    type: Literal["http"]
    url: str = Field(min_length=1)
    headers: dict[str, str] = Field(default_factory=dict)

    @field_validator("url")
    @classmethod
    def _http_url(cls, url: str) -> str:
        if not url.startswith(("http://", "https://")):
            raise ValueError("must start with http:// or https://")
        return url

    @model_validator(mode="after")
    def _no_sandbox(self) -> HttpServer:
        if self.agentbus.sandbox not in (None, False):
            raise ValueError("agentbus.sandbox applies to stdio servers only (an http server runs elsewhere)")
        return self


def _server_kind(value: Any) -> str:
    if isinstance(value, dict):
        kind = value.get("type", "stdio")
        return kind if isinstance(kind, str) else "?"
    return getattr(value, "type", "?")


McpServer = Annotated[
    Annotated[StdioServer, Tag("stdio")] | Annotated[HttpServer, Tag("http")],
    Discriminator(
        _server_kind,
        custom_error_type="mcp_server_type",
        custom_error_message="type must be 'stdio' (or absent) or 'http' (sse and ws servers are not supported)",
    ),
]


class McpConfig(BaseModel):
    """A whole ``.mcp.json`` (other top-level keys are kept and ignored)."""

    model_config = ConfigDict(extra="allow", frozen=True, populate_by_name=True)

    mcp_servers: dict[str, McpServer] = Field(default_factory=dict, alias="mcpServers")

    @field_validator("mcp_servers")
    @classmethod
    def _names(cls, servers: dict[str, Any]) -> dict[str, Any]:
        for name in servers:
            if not SERVER_NAME.match(name) or "__" in name:
                raise ValueError(f"server name {name!r} must be letters, digits, _ and - (no '__')")
        return servers


def _expand_tree(value: Any, env: Mapping[str, str], where: str) -> Any:
    if isinstance(value, str):
        try:
            return expand_variables(value, env)
        except MissingVariables as missing:
            raise McpConfigError(f"{where}: {missing}") from None
    if isinstance(value, list):
        return [_expand_tree(item, env, f"{where}[{index}]") for index, item in enumerate(value)]
    if isinstance(value, dict):
        return {key: _expand_tree(item, env, f"{where}.{key}") for key, item in value.items()}
    return value


_EXPANDED_KEYS = ("command", "args", "env", "url", "headers")


def _location(loc: tuple[int | str, ...]) -> str:
    """``mcpServers.NAME.key…`` from a pydantic location below ``mcpServers`` (the union's tags left out)."""
    if not loc:
        return "mcpServers"
    rest = loc[2:] if len(loc) > 1 and loc[1] in ("stdio", "http") else loc[1:]
    parts = [str(part) for index, part in enumerate(rest) if index == 0 or rest[index - 1] != "sandbox"]
    return ".".join(["mcpServers", str(loc[0]), *parts])


def parse_mcp_config(text: str, *, source: str, env: Mapping[str, str]) -> McpConfig:
    """The servers of one ``.mcp.json`` (``source`` names it in errors), variables expanded from ``env``.
    Raises :class:`McpConfigError` with the file and place of the first problem."""
    try:
        document = json.loads(text)
    except json.JSONDecodeError as error:
        raise McpConfigError(f"{source}:{error.lineno}:{error.colno}: not JSON: {error.msg}") from None
    if not isinstance(document, dict):
        raise McpConfigError(f"{source}: must be a JSON object with an mcpServers key")
    servers = document.get("mcpServers", {})
    if isinstance(servers, dict):
        expanded: dict[str, Any] = {}
        for name, server in servers.items():
            if isinstance(server, dict):
                server = {
                    key: _expand_tree(value, env, f"{source}: mcpServers.{name}.{key}")
                    if key in _EXPANDED_KEYS
                    else value
                    for key, value in server.items()
                }
            expanded[name] = server
        document = {**document, "mcpServers": expanded}
    try:
        return McpConfig.model_validate(document)
    except ValidationError as error:
        first = error.errors(include_url=False)[0]
        loc = tuple(first["loc"])
        where = _location(loc[1:]) if loc and loc[0] in ("mcpServers", "mcp_servers") else "mcpServers"
        raise McpConfigError(f"{source}: {where}: {first['msg']}") from None


def server_sandbox(server: McpServer, *, default: bool) -> McpSandboxOptions | None:
    """How ``server`` is sandboxed (None: it runs bare): its own ``agentbus.sandbox``, else ``default`` (the
    deployment's ``AGENTBUS_TOOLS__MCP_SANDBOX``). An http server never is (it is not the worker's process)."""
    if not isinstance(server, StdioServer):
        return None
    chosen = server.agentbus.sandbox
    if chosen is None:
        chosen = default
    if isinstance(chosen, McpSandboxOptions):
        return chosen
    return McpSandboxOptions() if chosen else None


def merge_mcp_configs(configs: list[tuple[str, McpConfig]]) -> dict[str, McpServer]:
    """The servers of several files (``(source, config)`` in order); one name in two files is an error."""
    merged: dict[str, McpServer] = {}
    seen_in: dict[str, str] = {}
    for source, config in configs:
        for name, server in config.mcp_servers.items():
            if name in merged:
                raise McpConfigError(f"{source}: mcpServers.{name}: also defined in {seen_in[name]}")
            merged[name] = server
            seen_in[name] = source
    return merged
