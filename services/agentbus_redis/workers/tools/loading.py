"""Loading a team's Python tools into a tool worker (issue 29).

Two sources, in this order: ``package.module:attribute`` specs (``agentbus worker tools --tools …``,
``AGENTBUS_TOOLS__MODULES``) and the ``agentbus.tools`` entry points of installed packages (each names a
``module:attribute`` the same way). The attribute may be a tool (``@tool`` function or a
:class:`~agentbus_redis.tools.tool.Tool` instance), a ``Tool`` subclass that takes no arguments, a list or tuple
of those, or a :class:`~agentbus_redis.workers.tools.registry.ToolRegistry`.

Anything that goes wrong — a module that does not import, a missing attribute, something that is not a tool —
is a :class:`ToolLoadError` whose message is one line naming the source.
"""

from __future__ import annotations

import importlib
import importlib.metadata
from collections.abc import Sequence

from agentbus_redis.config.settings import TOOLS_ENTRY_POINT_GROUP as ENTRY_POINT_GROUP
from agentbus_redis.errors import AgentbusError
from agentbus_redis.tools.tool import AnyTool, Tool
from agentbus_redis.workers.tools.registry import ToolRegistry


class ToolLoadError(AgentbusError):
    """A tool source that cannot be loaded (the message names it and says why, on one line)."""


def load_tools(modules: Sequence[str], *, entry_points: bool, group: str = ENTRY_POINT_GROUP) -> list[AnyTool]:
    """The tools of every ``modules`` spec, then (``entry_points``) of every installed entry point of ``group``."""
    tools: list[AnyTool] = []
    for spec in modules:
        tools += tools_of(_resolve(spec), f"--tools {spec}")
    if entry_points:
        for point in sorted(importlib.metadata.entry_points(group=group), key=lambda point: point.name):
            source = f"entry point {point.name!r} ({point.value}) of group {group}"
            try:
                value = point.load()
            except Exception as error:
                raise ToolLoadError(f"{source}: cannot load it: {_one_line(error)}") from error
            tools += tools_of(value, source)
    return tools


def _resolve(spec: str) -> object:
    module_name, colon, attribute = spec.partition(":")
    if not colon or not module_name.strip() or not attribute.strip():
        raise ToolLoadError(f"--tools {spec!r}: expected 'package.module:attribute'")
    try:
        value: object = importlib.import_module(module_name)
    except Exception as error:
        raise ToolLoadError(f"--tools {spec}: cannot import {module_name}: {_one_line(error)}") from error
    for part in attribute.split("."):
        try:
            value = getattr(value, part)
        except AttributeError:
            raise ToolLoadError(f"--tools {spec}: {module_name} has no attribute {attribute!r}") from None
    return value


def tools_of(value: object, source: str) -> list[AnyTool]:
    """The tools ``value`` holds (see the module docstring)."""
    if isinstance(value, Tool):
        return [value]
    if isinstance(value, ToolRegistry):
        return list(value)
    if isinstance(value, type) and issubclass(value, Tool):
        try:
            return [value()]
        except Exception as error:
            raise ToolLoadError(f"{source}: cannot create {value.__name__}(): {_one_line(error)}") from error
    if isinstance(value, list | tuple):
        return [tool for item in value for tool in tools_of(item, source)]
    raise ToolLoadError(
        f"{source}: {type(value).__name__} is not a tool (a @tool function, a Tool, a list of them or a ToolRegistry)"
    )


def _one_line(error: BaseException) -> str:
    text = " ".join(str(error).split())
    return f"{type(error).__name__}: {text}" if text else type(error).__name__
