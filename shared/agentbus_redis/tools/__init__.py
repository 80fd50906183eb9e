"""Tools: how one is written (a pydantic input model and an async run) and what the model is offered."""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from agentbus_redis.tools.catalog import CatalogEntry, HeldEntry, McpServerStatus, hold_recently_live, merge_catalog
    from agentbus_redis.tools.definitions import ToolDefinition
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
    "AnyTool",
    "CatalogEntry",
    "HeldEntry",
    "InputT",
    "InterruptBehavior",
    "McpServerStatus",
    "Tool",
    "ToolContext",
    "ToolDefinition",
    "ToolError",
    "ToolInput",
    "ToolOutput",
    "ToolProgress",
    "ToolSchemaError",
    "api_input_schema",
    "hold_recently_live",
    "json_list",
    "merge_catalog",
]

_MODULE_OF = {
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


def __getattr__(name: str) -> Any:
    # The façade imports a module only when one of its names is asked for (import time matters for the CLI).
    module = _MODULE_OF.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{module}"), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(__all__)
