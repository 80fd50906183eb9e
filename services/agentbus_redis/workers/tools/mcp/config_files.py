"""Reading the ``.mcp.json`` files a tool worker is given (``--mcp-config`` / ``AGENTBUS_TOOLS__MCP_CONFIG``)."""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from pathlib import Path

from agentbus_redis.mcp.config import McpConfigError, McpServer, merge_mcp_configs, parse_mcp_config

WORKER_OWN_PREFIXES = ("AGENTBUS_", "REDIS_")
"""Variables of the worker itself (its Redis URL and password, its internal key): ``${VAR}`` never expands them."""


def expansion_environment(environ: Mapping[str, str]) -> dict[str, str]:
    """What ``${VAR}`` in a config may read: the worker's environment without the worker's own settings."""
    return {name: value for name, value in environ.items() if not name.startswith(WORKER_OWN_PREFIXES)}


def read_mcp_configs(paths: Sequence[Path], environ: Mapping[str, str] | None = None) -> dict[str, McpServer]:
    """The servers of every file in ``paths``, merged (a name in two files is an error); raises
    :class:`McpConfigError` naming the file and the place of the problem."""
    env = expansion_environment(os.environ if environ is None else environ)
    configs = []
    for path in paths:
        try:
            text = path.read_text(encoding="utf-8")
        except OSError as error:
            raise McpConfigError(f"{path}: cannot be read: {error.strerror or error}") from None
        configs.append((str(path), parse_mcp_config(text, source=str(path), env=env)))
    return merge_mcp_configs(configs)
