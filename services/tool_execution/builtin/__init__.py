"""The built-in tools, each confined to a workspace."""

from __future__ import annotations

from services.tool_execution.builtin.bash import BashTool
from services.tool_execution.builtin.edit import EditTool
from services.tool_execution.builtin.glob import GlobTool
from services.tool_execution.builtin.grep import GrepTool
from services.tool_execution.builtin.read import ReadTool
from services.tool_execution.builtin.write import WriteTool
from services.tool_execution.tool import AnyTool
from services.tool_execution.workspace import Workspace

__all__ = ["BashTool", "EditTool", "GlobTool", "GrepTool", "ReadTool", "WriteTool", "builtin_tools"]


def builtin_tools(workspace: Workspace) -> list[AnyTool]:
    """Read, Glob, Grep, Write, Edit and Bash with default limits."""
    return [
        ReadTool(workspace),
        GlobTool(workspace),
        GrepTool(workspace),
        WriteTool(workspace),
        EditTool(workspace),
        BashTool(workspace),
    ]
