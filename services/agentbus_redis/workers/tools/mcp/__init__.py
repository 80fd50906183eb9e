"""MCP servers as tools of a tool worker: connections kept up with the official ``mcp`` SDK (pure rules in
``agentbus_redis.mcp``)."""

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
