"""M1.8: each tool's ``{name, description, input_schema}`` as the model sees it, derived from the input model the
tool validates calls with (tools/schema.py), checked here with a real JSON Schema validator."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import jsonschema
import pytest
from pydantic import BaseModel, Field, ValidationError

from agentbus_redis.tools.schema import ToolSchemaError, api_input_schema
from agentbus_redis.tools.tool import AnyTool
from agentbus_redis.workers.tools.registry import ToolRegistry, default_registry
from agentbus_redis.workers.tools.workspace import Workspace

ACCEPTED: dict[str, list[dict[str, Any]]] = {
    "Read": [{"file_path": "a.txt"}, {"file_path": "/w/a.txt", "offset": 0, "limit": 5}],
    "Glob": [{"pattern": "**/*.py"}, {"pattern": "*.md", "path": "docs"}],
    "Grep": [
        {"pattern": "def \\w+"},
        {
            "pattern": "x",
            "path": "src",
            "glob": "*.{ts,tsx}",
            "output_mode": "content",
            "-i": True,
            "-n": False,
            "-A": 1,
            "-B": 0,
            "-C": 2,
            "head_limit": 10,
            "multiline": True,
        },
    ],
    "Write": [{"file_path": "a.txt", "content": ""}],
    "Edit": [
        {"file_path": "a.txt", "old_string": "a", "new_string": "b"},
        {"file_path": "a.txt", "old_string": "a", "new_string": "b", "replace_all": True},
    ],
    "Bash": [
        {"command": "ls"},
        {"command": "sleep 1", "timeout": 5000, "description": "Wait a second", "run_in_background": False},
    ],
}
"""Inputs every tool accepts: its schema must accept them too."""

REJECTED: dict[str, list[dict[str, Any]]] = {
    "Read": [{}, {"file_path": 1}, {"file_path": "a", "offset": -1}, {"file_path": "a", "limit": 0}, {"path": "a"}],
    "Glob": [{}, {"pattern": "*", "unknown": 1}],
    "Grep": [{"pattern": "x", "output_mode": "lines"}, {"pattern": "x", "-A": -1}, {"pattern": "x", "-i": [True]}],
    "Write": [{"file_path": "a.txt"}, {"content": "x"}],
    "Edit": [{"file_path": "a", "old_string": "a"}, {"file_path": "a", "old_string": "a", "new_string": "b", "x": 1}],
    "Bash": [{"command": "ls", "timeout": 0}, {"command": ["ls"]}, {"cmd": "ls"}],
}
"""Inputs every tool rejects: its schema must reject them too (the model is told the same rules)."""


@pytest.fixture
def registry(tmp_path: Path) -> ToolRegistry:
    return default_registry(Workspace.at(tmp_path))


def _keywords(node: Any, keys: set[str]) -> set[str]:
    """Every keyword used anywhere in a schema (property names excluded)."""
    if isinstance(node, list):
        for item in node:
            _keywords(item, keys)
    elif isinstance(node, dict):
        for key, value in node.items():
            if key == "properties":
                for schema in value.values():
                    _keywords(schema, keys)
                continue
            keys.add(key)
            _keywords(value, keys)
    return keys


def _tools(registry: ToolRegistry) -> list[AnyTool]:
    return list(registry)


def test_m1_8_every_registered_tool_has_a_definition(registry: ToolRegistry) -> None:
    definitions = registry.definitions()
    assert [definition.name for definition in definitions] == registry.names
    assert set(ACCEPTED) == set(registry.names), "add examples for a new tool"
    for definition in definitions:
        assert definition.description.strip(), f"{definition.name} has no description"
        schema = definition.input_schema
        jsonschema.Draft202012Validator.check_schema(schema)
        assert schema["type"] == "object"
        assert not {"title", "$defs", "$ref"} & _keywords(schema, set()), definition.name
        assert definition.to_wire().keys() == {"name", "description", "input_schema"}


def test_m1_8_schema_properties_and_required_are_the_input_models(registry: ToolRegistry) -> None:
    for tool in _tools(registry):
        schema = tool.definition().input_schema
        fields = tool.input_model.model_fields
        names = {field.alias or name for name, field in fields.items()}
        required = {field.alias or name for name, field in fields.items() if field.is_required()}
        assert set(schema["properties"]) == names, tool.name
        assert set(schema.get("required", [])) == required, tool.name
        assert all(prop.get("description") for prop in schema["properties"].values()), tool.name


def test_m1_8_schema_accepts_what_the_tool_accepts(registry: ToolRegistry) -> None:
    for tool in _tools(registry):
        validator = jsonschema.Draft202012Validator(tool.definition().input_schema)
        for example in ACCEPTED[tool.name]:
            tool.input_model.model_validate(example)
            errors = [error.message for error in validator.iter_errors(example)]
            assert errors == [], (tool.name, example)


def test_m1_8_schema_rejects_what_the_tool_rejects(registry: ToolRegistry) -> None:
    for tool in _tools(registry):
        validator = jsonschema.Draft202012Validator(tool.definition().input_schema)
        for example in REJECTED[tool.name]:
            with pytest.raises(ValidationError):
                tool.input_model.model_validate(example)
            assert not validator.is_valid(example), (tool.name, example)


def test_m1_8_descriptions_state_the_instances_limits(tmp_path: Path) -> None:
    from agentbus_redis.workers.tools.builtin import BashTool, GlobTool, ReadTool

    workspace = Workspace.at(tmp_path)
    assert "up to 500 lines" in ReadTool(workspace, default_limit=500).description()
    assert "at most 7 (" in GlobTool(workspace, max_results=7).description()
    bash = BashTool(workspace, default_timeout_ms=60_000, max_timeout_ms=90_000, shell="/bin/sh").description()
    assert "`sh -c COMMAND`" in bash
    assert "60000 (1 minute) unless given, at most 90000 (1.5 minutes)" in bash


class _Inner(BaseModel):
    title: str = Field(description="a property called title")


class _Outer(BaseModel):
    inner: _Inner
    maybe: _Inner | None = None
    count: int | None = Field(default=None, ge=1, description="how many")
    either: int | str | None = None


def test_api_input_schema_inlines_refs_and_drops_titles_and_null_branches() -> None:
    source = _Outer.model_json_schema()
    schema = api_input_schema(source)
    assert "$defs" in source  # the input is left alone
    inner = {
        "type": "object",
        "properties": {"title": {"type": "string", "description": "a property called title"}},
        "required": ["title"],
    }
    assert schema == {
        "type": "object",
        "properties": {
            "inner": inner,
            "maybe": inner,
            "count": {"type": "integer", "minimum": 1, "description": "how many"},
            "either": {"anyOf": [{"type": "integer"}, {"type": "string"}, {"type": "null"}], "default": None},
        },
        "required": ["inner"],
    }


class _Node(BaseModel):
    children: list[_Node] = []


def test_api_input_schema_refuses_recursive_and_non_object_schemas() -> None:
    with pytest.raises(ToolSchemaError, match="recursive"):
        api_input_schema(_Node.model_json_schema())
    with pytest.raises(ToolSchemaError, match="type object"):
        api_input_schema({"type": "string"})
    with pytest.raises(ToolSchemaError, match="names no definition"):
        api_input_schema({"type": "object", "properties": {"a": {"$ref": "#/$defs/Missing"}}})
