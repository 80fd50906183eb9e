"""Tool lookup by name or alias."""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from typing import Protocol

from agentbus_redis.sandbox.runner import Sandbox
from agentbus_redis.tools.definitions import ToolDefinition
from agentbus_redis.tools.tool import AnyTool
from agentbus_redis.workers.tools.workspace import Workspace


class DuplicateToolName(ValueError):
    """Two tools claim the same name or alias."""


class ToolSource(Protocol):
    """Tools that come and go while the worker runs (an MCP server's): asked at every lookup."""

    def tools(self) -> Sequence[AnyTool]: ...


class ToolRegistry:
    """The tools a worker offers, found by ``name`` or any of their ``aliases``: its fixed tools, then those
    its ``sources`` offer at the moment (a fixed tool's name wins)."""

    def __init__(self, tools: Iterable[AnyTool], sources: Sequence[ToolSource] = ()) -> None:
        self.sources = list(sources)
        self._tools: list[AnyTool] = []
        self._by_name: dict[str, AnyTool] = {}
        for tool in tools:
            for key in (tool.name, *tool.aliases):
                if key in self._by_name:
                    raise DuplicateToolName(f"tool name {key!r} is used twice")
                self._by_name[key] = tool
            self._tools.append(tool)

    def get(self, name: str) -> AnyTool | None:
        """The tool called ``name`` (or aliased so), or None (R8.1: unknown tool)."""
        tool = self._by_name.get(name)
        if tool is None:
            tool = next((tool for tool in self._dynamic() if tool.name == name), None)
        return tool

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and self.get(name) is not None

    def _dynamic(self) -> list[AnyTool]:
        return [tool for source in self.sources for tool in source.tools() if tool.name not in self._by_name]

    def __iter__(self) -> Iterator[AnyTool]:
        return iter([*self._tools, *self._dynamic()])

    @property
    def names(self) -> list[str]:
        """Canonical names, in registration order (then the sources' tools)."""
        return [tool.name for tool in self]

    def definitions(self) -> list[ToolDefinition]:
        """What the worker tells the model it can run (published in the tool catalog), in registration order."""
        return [tool.definition() for tool in self]


def default_registry(workspace: Workspace, sandbox: Sandbox | None = None) -> ToolRegistry:
    """Read, Glob, Grep, Write, Edit and Bash, all confined to ``workspace`` (Bash in ``sandbox`` when given)."""
    from agentbus_redis.workers.tools.builtin import builtin_tools

    return ToolRegistry(builtin_tools(workspace, sandbox))
