"""What the model is told about a tool: the Messages API's tool definition (M1.8), as tool workers
publish it in the tool catalog and the model worker sends it.

Snake_case like the API payload it mirrors; unknown keys (``strict``, ``cache_control``, …) pass through.
"""

from __future__ import annotations

from pydantic import ConfigDict, Field

from agentbus_redis.json_types import JsonObject
from agentbus_redis.wire import WireModel


class ToolDefinition(WireModel):
    """``{name, description, input_schema}`` of one tool (M1.8)."""

    model_config = ConfigDict(extra="allow", frozen=True)

    name: str = Field(min_length=1, max_length=128)
    description: str = ""
    input_schema: JsonObject
