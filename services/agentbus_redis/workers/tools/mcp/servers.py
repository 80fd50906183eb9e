"""A tool worker's MCP servers: their connections, their tools as a tool source, their state.

One connection per (worker, server) by default, shared by every session the worker serves. A server marked
``"agentbus": {"perSession": true}`` gets a connection per session workspace, started on the first call in
that workspace (stdio: the process runs there) and closed after ``session_idle_s`` without a call; the tools
the model is offered come from a listing connection the worker keeps in the tools root.

A sandboxed stdio server (``"agentbus": {"sandbox": …}``, ``connection.ServerSandbox``) sees one writable
directory: a per-session connection its session's workspace (as the session's Bash commands do), the
connection every session shares (and a per-session server's listing connection) a directory of the server's
own (``server_dir``), never the tools root with every session's workspace in it.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from pathlib import Path

import structlog

from agentbus_redis.mcp.config import McpServer
from agentbus_redis.tools.catalog import McpServerStatus
from agentbus_redis.tools.tool import AnyTool
from agentbus_redis.workers.tools.mcp.connection import ConnectionPolicy, McpConnection, ServerSandbox
from agentbus_redis.workers.tools.mcp.tool import McpTool

log = structlog.get_logger(__name__)


class McpServers:
    """See the module docstring. ``on_change`` is called when a listing connection's state or tools change."""

    def __init__(
        self,
        servers: Mapping[str, McpServer],
        *,
        root: Path,
        policy: ConnectionPolicy,
        max_output_chars: int,
        session_idle_s: float = 600.0,
        on_change: Callable[[], None] = lambda: None,
        sandboxes: Mapping[str, ServerSandbox] | None = None,
        server_dir: Callable[[str], Path] | None = None,
    ) -> None:
        self.servers = dict(servers)
        self.root = root
        self.policy = policy
        self.max_output_chars = max_output_chars
        self.session_idle_s = session_idle_s
        self.on_change = on_change
        self.sandboxes = dict(sandboxes or {})
        """The sandboxed stdio servers' confinement, by server name."""
        if self.sandboxes and server_dir is None:
            raise ValueError("sandboxed MCP servers need a server_dir (their shared connection's directory)")
        self.listing = {
            name: McpConnection(
                name,
                server,
                cwd=server_dir(name) if server_dir is not None and name in self.sandboxes else root,
                policy=policy,
                on_change=self._changed,
                sandbox=self.sandboxes.get(name),
            )
            for name, server in self.servers.items()
        }
        self._per_session: dict[tuple[str, Path], McpConnection] = {}
        self._last_used: dict[tuple[str, Path], float] = {}

    def _changed(self) -> None:
        self.on_change()

    def start(self) -> None:
        for connection in self.listing.values():
            connection.start()

    async def stop(self) -> None:
        await asyncio.gather(
            *(connection.stop() for connection in [*self.listing.values(), *self._per_session.values()])
        )
        self._per_session.clear()

    def tools(self, workspace: Path | None = None) -> list[AnyTool]:
        """The tools of the connected servers, as seen from ``workspace`` (its per-session connections)."""
        tools: list[AnyTool] = []
        for name, listing in self.listing.items():
            if listing.state != "connected":
                continue
            per_session = self.servers[name].agentbus.per_session
            finder = self._session_finder(name, workspace or self.root) if per_session else self._shared_finder(listing)
            tools.extend(McpTool(name, tool, finder, max_output_chars=self.max_output_chars) for tool in listing.tools)
        return tools

    def source(self, workspace: Path | None) -> McpToolSource:
        return McpToolSource(self, workspace)

    def _shared_finder(self, connection: McpConnection) -> Callable[[], Awaitable[McpConnection]]:
        async def find() -> McpConnection:
            return connection

        return find

    def _session_finder(self, name: str, workspace: Path) -> Callable[[], Awaitable[McpConnection]]:
        async def find() -> McpConnection:
            key = (name, workspace)
            connection = self._per_session.get(key)
            if connection is None:
                connection = McpConnection(
                    name,
                    self.servers[name],
                    cwd=workspace,
                    policy=self.policy,
                    on_change=self._changed,
                    sandbox=self.sandboxes.get(name),
                )
                self._per_session[key] = connection
                connection.start()
                log.info("mcp_session_server_started", server=name, workspace=str(workspace))
            self._last_used[key] = time.monotonic()
            await connection.wait_connected(self.policy.connect_timeout_s)
            return connection

        return find

    async def close_idle(self) -> int:
        """Close the per-session connections unused for ``session_idle_s``; how many went."""
        now = time.monotonic()
        idle = [key for key, used in self._last_used.items() if now - used >= self.session_idle_s]
        for key in idle:
            self._last_used.pop(key, None)
            connection = self._per_session.pop(key, None)
            if connection is not None:
                await connection.stop()
        return len(idle)

    def statuses(self) -> list[McpServerStatus]:
        """Each server's state, for the catalog entry (``agentbus tools ls``) and ``/readyz``."""
        statuses = []
        for name, listing in self.listing.items():
            options = self.servers[name].agentbus
            sessions = sum(1 for server, _ in self._per_session if server == name)
            statuses.append(
                McpServerStatus(
                    name=name,
                    transport=listing.transport,
                    state=listing.state,
                    error=listing.error,
                    tools=[tool.name for tool in listing.tools],
                    required=options.required,
                    per_session=options.per_session,
                    sandboxed=name in self.sandboxes,
                    session_connections=sessions,
                    connects=listing.connects,
                    tools_changed=listing.list_changes,
                )
            )
        return statuses


class McpToolSource:
    """The MCP tools as one session workspace's registry finds them (a live view: servers come and go)."""

    def __init__(self, servers: McpServers, workspace: Path | None) -> None:
        self.servers = servers
        self.workspace = workspace

    def tools(self) -> Sequence[AnyTool]:
        return self.servers.tools(self.workspace)
