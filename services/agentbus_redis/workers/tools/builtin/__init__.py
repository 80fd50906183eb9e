"""The built-in tools, each confined to a workspace."""

from __future__ import annotations

from agentbus_redis.tools.tool import AnyTool
from agentbus_redis.workers.tools.builtin.bash import BashTool
from agentbus_redis.workers.tools.builtin.edit import EditTool
from agentbus_redis.workers.tools.builtin.glob import GlobTool
from agentbus_redis.workers.tools.builtin.grep import GrepTool
from agentbus_redis.workers.tools.builtin.read import ReadTool
from agentbus_redis.workers.tools.builtin.write import WriteTool
from agentbus_redis.workers.tools.workspace import Workspace

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
