"""Each session's tools: the built-in tools confined to the session's workspace (Bash in the worker's
sandbox; none when the worker runs without built-ins), beside the tools every session shares (Agent,
SendMessage, the tools the worker loaded). Registries are cheap and kept for the
most recently used workspaces."""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Sequence
from pathlib import Path

from agentbus_redis.sandbox.runner import Sandbox
from agentbus_redis.sandbox.workspaces import SessionWorkspaces
from agentbus_redis.tools.tool import AnyTool
from agentbus_redis.workers.tools.builtin import builtin_tools
from agentbus_redis.workers.tools.registry import ToolRegistry, ToolSource
from agentbus_redis.workers.tools.workspace import Workspace

REGISTRIES_KEPT = 256


class SessionTools:
    """Finds the tool registry and workspace of a session (see the module docstring)."""

    def __init__(
        self,
        workspaces: SessionWorkspaces,
        *,
        sandbox: Sandbox | None,
        shared: Sequence[AnyTool] = (),
        builtins: bool = True,
        kept: int = REGISTRIES_KEPT,
        sources: Callable[[Path], Sequence[ToolSource]] | None = None,
    ) -> None:
        self.workspaces = workspaces
        self.sandbox = sandbox
        self.shared = list(shared)
        self.builtins = builtins
        self.kept = kept
        self.sources = sources
        """The tools that come and go (MCP servers'), as a session workspace sees them."""
        self._registries: OrderedDict[Path, ToolRegistry] = OrderedDict()

    def template(self) -> ToolRegistry:
        """The tools as the model is offered them (their definitions do not depend on the workspace)."""
        return self._registry(Workspace(self.workspaces.root))

    def for_session(self, session_id: str) -> tuple[ToolRegistry, Workspace]:
        """``session_id``'s registry and workspace (made on first use; ``InvalidSessionId`` for a bad id)."""
        workspace = Workspace.at(self.workspaces.for_session(session_id))
        registry = self._registries.get(workspace.root)
        if registry is None:
            registry = self._registries[workspace.root] = self._registry(workspace)
            while len(self._registries) > self.kept:
                self._registries.popitem(last=False)
        else:
            self._registries.move_to_end(workspace.root)
        return registry, workspace

    def _registry(self, workspace: Workspace) -> ToolRegistry:
        sources = self.sources(workspace.root) if self.sources is not None else ()
        builtins = builtin_tools(workspace, self.sandbox) if self.builtins else ()
        return ToolRegistry([*builtins, *self.shared], sources)
