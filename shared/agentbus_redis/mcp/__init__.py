"""MCP servers as tools, the pure part: the ``.mcp.json`` config, tool names, and results as tool_results
(the connections live in ``agentbus_redis.workers.tools.mcp``)."""

from agentbus_redis.mcp.config import (
    AgentbusServerOptions,
    HttpServer,
    McpConfig,
    McpConfigError,
    McpSandboxOptions,
    McpServer,
    MissingVariables,
    StdioServer,
    expand_variables,
    merge_mcp_configs,
    parse_mcp_config,
    server_sandbox,
)
from agentbus_redis.mcp.names import MCP_PREFIX, mcp_tool_name, normalize_mcp_name
from agentbus_redis.mcp.results import (
    DEFAULT_MAX_OUTPUT_CHARS,
    McpProgress,
    mcp_progress_data,
    mcp_tool_output,
    truncation_note,
)

__all__ = [
    "DEFAULT_MAX_OUTPUT_CHARS",
    "MCP_PREFIX",
    "AgentbusServerOptions",
    "HttpServer",
    "McpConfig",
    "McpConfigError",
    "McpProgress",
    "McpSandboxOptions",
    "McpServer",
    "MissingVariables",
    "StdioServer",
    "expand_variables",
    "mcp_progress_data",
    "mcp_tool_name",
    "mcp_tool_output",
    "merge_mcp_configs",
    "normalize_mcp_name",
    "parse_mcp_config",
    "server_sandbox",
    "truncation_note",
]
