"""Tools: how one is written (a pydantic input model and an async run) and what the model is offered.

The ``@tool`` decorator is ``agentbus_redis.sdk.tool`` (here ``tool`` names the module of the Tool API)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from agentbus_redis.lazy_facade import lazy_facade

if TYPE_CHECKING:
    from agentbus_redis.tools.catalog import CatalogEntry, HeldEntry, McpServerStatus, hold_recently_live, merge_catalog
    from agentbus_redis.tools.definitions import ToolDefinition
    from agentbus_redis.tools.function_tool import FunctionTool, ToolDefinitionError, tool_output
    from agentbus_redis.tools.pools import (
        DEFAULT_POOL,
        ToolRoutes,
        pool_name_problem,
        split_by_pool,
        tool_routes,
    )
    from agentbus_redis.tools.schema import ToolSchemaError, api_input_schema
    from agentbus_redis.tools.tool import (
        AnyTool,
        InputT,
        InterruptBehavior,
        Tool,
        ToolContext,
        ToolError,
        ToolInput,
        ToolOutput,
        ToolProgress,
        json_list,
    )

__all__ = [
    "DEFAULT_POOL",
    "AnyTool",
    "CatalogEntry",
    "FunctionTool",
    "HeldEntry",
    "InputT",
    "InterruptBehavior",
    "McpServerStatus",
    "Tool",
    "ToolContext",
    "ToolDefinition",
    "ToolDefinitionError",
    "ToolError",
    "ToolInput",
    "ToolOutput",
    "ToolProgress",
    "ToolRoutes",
    "ToolSchemaError",
    "api_input_schema",
    "hold_recently_live",
    "json_list",
    "merge_catalog",
    "pool_name_problem",
    "split_by_pool",
    "tool_output",
    "tool_routes",
]

_MODULE_OF = {
    "DEFAULT_POOL": "pools",
    "FunctionTool": "function_tool",
    "ToolDefinitionError": "function_tool",
    "ToolRoutes": "pools",
    "pool_name_problem": "pools",
    "split_by_pool": "pools",
    "tool_output": "function_tool",
    "tool_routes": "pools",
    "AnyTool": "tool",
    "CatalogEntry": "catalog",
    "HeldEntry": "catalog",
    "InputT": "tool",
    "InterruptBehavior": "tool",
    "McpServerStatus": "catalog",
    "Tool": "tool",
    "ToolContext": "tool",
    "ToolDefinition": "definitions",
    "ToolError": "tool",
    "ToolInput": "tool",
    "ToolOutput": "tool",
    "ToolProgress": "tool",
    "ToolSchemaError": "schema",
    "api_input_schema": "schema",
    "hold_recently_live": "catalog",
    "json_list": "tool",
    "merge_catalog": "catalog",
}


__getattr__, __dir__ = lazy_facade(globals(), _MODULE_OF)
