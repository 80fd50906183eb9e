"""A tool registry's sources (issue 29): tools that come and go while the worker runs (an MCP server's) are
found at every lookup, listed after the fixed tools, and never shadow a fixed tool's name."""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence

from agentbus_redis.tools.tool import AnyTool, Tool, ToolContext, ToolInput, ToolOutput, ToolProgress
from agentbus_redis.workers.tools.registry import ToolRegistry


class Named(Tool[ToolInput]):
    input_model = ToolInput

    def __init__(self, name: str, description: str = "") -> None:
        self.name = name
        self.text = description

    def description(self) -> str:
        return self.text

    async def call(self, tool_input: ToolInput, ctx: ToolContext) -> AsyncIterator[ToolProgress | ToolOutput]:
        yield ToolOutput(self.name)


class Changing:
    def __init__(self) -> None:
        self.offered: list[AnyTool] = []

    def tools(self) -> Sequence[AnyTool]:
        return self.offered


def test_a_sources_tools_are_found_while_it_offers_them() -> None:
    source = Changing()
    registry = ToolRegistry([Named("Read")], [source])
    assert registry.get("mcp__s__echo") is None
    assert "mcp__s__echo" not in registry
    source.offered = [Named("mcp__s__echo")]
    found = registry.get("mcp__s__echo")
    assert found is not None
    assert found.name == "mcp__s__echo"
    assert registry.names == ["Read", "mcp__s__echo"]
    assert [definition.name for definition in registry.definitions()] == ["Read", "mcp__s__echo"]
    source.offered = []
    assert registry.get("mcp__s__echo") is None
    assert registry.names == ["Read"]


def test_a_fixed_tool_keeps_its_name() -> None:
    source = Changing()
    source.offered = [Named("Read", "from the source"), Named("mcp__s__x")]
    registry = ToolRegistry([Named("Read", "fixed")], [source])
    read = registry.get("Read")
    assert read is not None
    assert read.description() == "fixed"
    assert registry.names == ["Read", "mcp__s__x"]
