"""MCP servers as tools of a tool worker: connections kept up with the official ``mcp`` SDK (pure rules in
``agentbus_redis.mcp``)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from agentbus_redis.lazy_facade import lazy_facade

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


# Lazy: the mcp SDK takes most of a second to import, and a tool worker without MCP servers never loads it.
__getattr__, __dir__ = lazy_facade(globals(), _MODULE_OF)
