"""The built-in tools, each confined to a workspace."""

from __future__ import annotations

from agentbus_redis.sandbox.runner import Sandbox
from agentbus_redis.tools.tool import AnyTool
from agentbus_redis.workers.tools.builtin.bash import BashTool
from agentbus_redis.workers.tools.builtin.edit import EditTool
from agentbus_redis.workers.tools.builtin.glob import GlobTool
from agentbus_redis.workers.tools.builtin.grep import GrepTool
from agentbus_redis.workers.tools.builtin.read import ReadTool
from agentbus_redis.workers.tools.builtin.write import WriteTool
from agentbus_redis.workers.tools.workspace import Workspace

__all__ = ["BashTool", "EditTool", "GlobTool", "GrepTool", "ReadTool", "WriteTool", "builtin_tools"]


def builtin_tools(workspace: Workspace, sandbox: Sandbox | None = None) -> list[AnyTool]:
    """Read, Glob, Grep, Write, Edit and Bash with default limits (Bash in ``sandbox`` when given)."""
    return [
        ReadTool(workspace),
        GlobTool(workspace),
        GrepTool(workspace),
        WriteTool(workspace),
        EditTool(workspace),
        BashTool(workspace, sandbox=sandbox),
    ]
