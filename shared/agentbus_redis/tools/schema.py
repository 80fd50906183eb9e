"""A pydantic input model's JSON schema as a Messages API ``input_schema`` (M1.8): what the model is told a
tool accepts, derived from the model the tool validates with, so the two cannot drift.

pydantic writes more than the model needs to read: a ``title`` on every schema (``"File Path"``), ``$defs``
plus ``$ref`` for nested models and enums, and ``anyOf [X, null]`` with ``default: null`` for every optional
field. The API's tool definitions are plain JSON Schema with ``type: object`` at the top; optional properties
are simply not ``required`` (Claude Code's own tool schemas never offer ``null``). So:

* every ``title`` keyword goes (property *names* called ``title`` stay: only schema keywords are removed);
* every ``$ref`` into ``$defs`` is replaced by the definition it names, and ``$defs`` goes;
* ``anyOf`` of one schema and ``{"type": "null"}`` becomes that schema, and ``default: null`` goes;
* ``description``, constraints (``minimum``, ``enum`` …), non-null defaults and ``additionalProperties``
  stay: they are what the model should know.
"""

from __future__ import annotations

from agentbus_redis.errors import AgentbusError
from agentbus_redis.json_types import JsonObject, JsonValue

_NULL_SCHEMA: JsonObject = {"type": "null"}
_REF_PREFIX = "#/$defs/"
_SCHEMA_MAPS = ("properties", "$defs", "patternProperties")
"""Keywords whose value maps names to schemas (the names are not keywords)."""


class ToolSchemaError(AgentbusError, ValueError):
    """A schema that cannot be offered as a tool's ``input_schema``; ``location`` is a JSON pointer."""

    def __init__(self, location: str, reason: str) -> None:
        super().__init__(f"tool input schema at {location or '/'}: {reason}")
        self.location = location
        self.reason = reason


def api_input_schema(model_schema: JsonObject) -> JsonObject:
    """``model_schema`` (``Model.model_json_schema()``) cleaned as the module docstring says. Never mutates
    its input. Raises :class:`ToolSchemaError` for a top level that is not ``type: object``, a ``$ref`` that
    names no definition or a recursive one (a tool input cannot be a recursive type: nothing to inline)."""
    raw_defs = model_schema.get("$defs", {})
    defs = raw_defs if isinstance(raw_defs, dict) else {}
    cleaned = _clean(model_schema, defs, "", ())
    if not isinstance(cleaned, dict) or cleaned.get("type") != "object":
        raise ToolSchemaError("", "the top level must be a schema of type object")
    cleaned.setdefault("properties", {})
    return cleaned


def _clean(node: JsonValue, defs: JsonObject, location: str, expanding: tuple[str, ...]) -> JsonValue:
    if isinstance(node, list):
        return [_clean(item, defs, f"{location}/{index}", expanding) for index, item in enumerate(node)]
    if not isinstance(node, dict):
        return node
    ref = node.get("$ref")
    if isinstance(ref, str):
        return _inline(node, ref, defs, location, expanding)
    result: JsonObject = {}
    for key, value in node.items():
        if key in ("title", "$defs"):
            continue
        if key in _SCHEMA_MAPS and isinstance(value, dict):
            result[key] = {
                name: _clean(item, defs, f"{location}/{key}/{name}", expanding) for name, item in value.items()
            }
        else:
            result[key] = _clean(value, defs, f"{location}/{key}", expanding)
    return _without_null(result)


def _inline(node: JsonObject, ref: str, defs: JsonObject, location: str, expanding: tuple[str, ...]) -> JsonValue:
    """The definition ``ref`` names, cleaned, with the referring node's own keywords (a description) on top."""
    name = ref.removeprefix(_REF_PREFIX)
    target = defs.get(name) if ref.startswith(_REF_PREFIX) else None
    if not isinstance(target, dict):
        raise ToolSchemaError(location, f"$ref {ref!r} names no definition in $defs")
    if name in expanding:
        raise ToolSchemaError(location, f"$ref {ref!r} is recursive")
    inlined = _clean(target, defs, location, (*expanding, name))
    assert isinstance(inlined, dict)
    siblings = _clean({key: value for key, value in node.items() if key != "$ref"}, defs, location, expanding)
    assert isinstance(siblings, dict)
    return {**inlined, **siblings}


def _without_null(schema: JsonObject) -> JsonObject:
    """``{anyOf: [X, {type: null}], default: null, …}`` → ``{…X, …}``: optional means "may be left out"."""
    branches = schema.get("anyOf")
    if not isinstance(branches, list) or _NULL_SCHEMA not in branches:
        return schema
    others = [branch for branch in branches if branch != _NULL_SCHEMA]
    if len(others) != 1 or not isinstance(others[0], dict):
        return schema
    rest = {key: value for key, value in schema.items() if key != "anyOf" and not (key == "default" and value is None)}
    return {**others[0], **rest}
