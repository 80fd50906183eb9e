"""The one escape hatch for free-form JSON (tool input, tool output, raw stream events)."""

from __future__ import annotations

from typing import Annotated, TypeAlias

from pydantic import JsonValue as _PydanticJsonValue
from pydantic import SerializeAsAny

JsonValue: TypeAlias = Annotated[_PydanticJsonValue, SerializeAsAny()]
"""pydantic's ``JsonValue``, dumped by each value's own type: pydantic's serializer picks the union member
with a Python callback per value (``_get_type_name``), 16 calls per assistant message dumped."""

JsonObject = dict[str, JsonValue]

__all__ = ["JsonObject", "JsonValue"]
