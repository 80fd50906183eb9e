"""MCP servers as tools of a tool worker: connections kept up with the official ``mcp`` SDK (pure rules in
``agentbus_redis.mcp``)."""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from agentbus_redis.workers.tools.mcp.config_files import expansion_environment, read_mcp_configs
    from agentbus_redis.workers.tools.mcp.connection import ConnectionPolicy, McpConnection, McpServerGone
    from agentbus_redis.workers.tools.mcp.servers import McpServers, McpToolSource
    from agentbus_redis.workers.tools.mcp.tool import McpArguments, McpTool

__all__ = [
    "ConnectionPolicy",
    "McpArguments",
    "McpConnection",
    "McpServerGone",
    "McpServers",
    "McpTool",
    "McpToolSource",
    "expansion_environment",
    "read_mcp_configs",
]

_MODULE_OF = {
    "ConnectionPolicy": "connection",
    "McpArguments": "tool",
    "McpConnection": "connection",
    "McpServerGone": "connection",
    "McpServers": "servers",
    "McpTool": "tool",
    "McpToolSource": "servers",
    "expansion_environment": "config_files",
    "read_mcp_configs": "config_files",
}


def __getattr__(name: str) -> Any:
    # The mcp SDK takes most of a second to import: a tool worker without MCP servers never loads it.
    module = _MODULE_OF.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{module}"), name)
    globals()[name] = value
    return value
