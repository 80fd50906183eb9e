"""The one escape hatch for free-form JSON (tool input, tool output, raw stream events)."""

from __future__ import annotations

from pydantic import JsonValue

JsonObject = dict[str, JsonValue]

__all__ = ["JsonObject", "JsonValue"]
