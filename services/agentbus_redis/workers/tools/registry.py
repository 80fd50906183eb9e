"""Tool lookup by name or alias."""

from __future__ import annotations

from collections.abc import Iterable, Iterator

from agentbus_redis.sandbox.runner import Sandbox
from agentbus_redis.tools.definitions import ToolDefinition
from agentbus_redis.tools.tool import AnyTool
from agentbus_redis.workers.tools.workspace import Workspace


class DuplicateToolName(ValueError):
    """Two tools claim the same name or alias."""


class ToolRegistry:
    """The tools a worker offers, found by ``name`` or any of their ``aliases``."""

    def __init__(self, tools: Iterable[AnyTool]) -> None:
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
        return self._by_name.get(name)

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and name in self._by_name

    def __iter__(self) -> Iterator[AnyTool]:
        return iter(self._tools)

    @property
    def names(self) -> list[str]:
        """Canonical names, in registration order."""
        return [tool.name for tool in self._tools]

    def definitions(self) -> list[ToolDefinition]:
        """What the worker tells the model it can run (published in the tool catalog), in registration order."""
        return [tool.definition() for tool in self._tools]


def default_registry(workspace: Workspace, sandbox: Sandbox | None = None) -> ToolRegistry:
    """Read, Glob, Grep, Write, Edit and Bash, all confined to ``workspace`` (Bash in ``sandbox`` when given)."""
    from agentbus_redis.workers.tools.builtin import builtin_tools

    return ToolRegistry(builtin_tools(workspace, sandbox))
