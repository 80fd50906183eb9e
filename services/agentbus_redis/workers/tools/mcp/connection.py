"""One live connection to one MCP server, kept up for as long as the worker wants it.

:class:`McpConnection` runs a loop: connect (stdio: start the process; http: open the session), list the tools,
then watch the connection — a ping every ``ping_interval_s``, and a call that finds the connection gone — and when
it is lost, forget the tools (they leave the catalog), wait a backoff that doubles up to ``backoff_max_s`` and
connect again. ``notifications/tools/list_changed`` (on a 2026-07-28 connection: a ``subscriptions/listen``
stream) lists the tools again. Every change of state or tools calls ``on_change``.

A stdio server's process gets only its configured ``env`` over the SDK's minimal inherited set (HOME, LOGNAME,
PATH, SHELL, TERM, USER) — never the worker's own environment, which holds its Redis credentials and internal key
— and runs in ``cwd`` (the tools root, or the session's workspace for a per-session server).

A sandboxed stdio server (:class:`ServerSandbox`, ``"agentbus": {"sandbox": …}``) runs under the worker's
bubblewrap sandbox exactly as a Bash command does (``Sandbox.program_argv``): the system and its
``readOnlyPaths`` read-only, ``cwd`` the only writable directory (a session's workspace, or the server's own
directory for a connection every session shares), private ``/tmp`` and ``/proc``, its own PID, IPC and network
namespaces, the command limits, and an environment of the sandbox's allow-listed names with its configured
``env`` on top (the SDK's inherited names it does not set are unset inside). Its network is its entry's
allow-list, served by the worker's proxy on a socket of its own for as long as the connection lives (none
without one).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import mcp_types
import structlog
from mcp.client.client import Client
from mcp.client.context import ClientRequestContext
from mcp.client.session import IncomingMessage
from mcp.client.stdio import DEFAULT_INHERITED_ENV_VARS, StdioServerParameters
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client
from mcp_types.version import MODERN_PROTOCOL_VERSIONS

from agentbus_redis.confinement.network import NetworkPolicy
from agentbus_redis.json_types import JsonObject
from agentbus_redis.mcp.config import HttpServer, McpServer, StdioServer
from agentbus_redis.mcp.results import McpProgress
from agentbus_redis.sandbox.runner import Sandbox

log = structlog.get_logger(__name__)

ConnectionState = Literal["connecting", "connected", "restarting", "failed", "stopped"]
"""connecting: first attempt; connected: tools listed; restarting: lost, waiting to reconnect (the last attempt
failed: see ``error``); stopped: closed by the worker."""


@dataclass(frozen=True, slots=True)
class ConnectionPolicy:
    """How a connection is kept up (from the tool settings)."""

    connect_timeout_s: float = 30.0
    ping_interval_s: float = 5.0
    backoff_initial_s: float = 0.5
    backoff_max_s: float = 30.0


@dataclass(frozen=True, slots=True)
class ServerSandbox:
    """How a sandboxed stdio server runs (see the module docstring)."""

    sandbox: Sandbox
    """The worker's sandbox with the server's read-only paths added."""
    network: NetworkPolicy
    """The deployment's policy narrowed by the server's entry (nothing allowed: no network)."""

    @contextlib.asynccontextmanager
    async def parameters(self, server: StdioServer, cwd: Path) -> AsyncIterator[StdioServerParameters]:
        """The SDK's launch parameters of ``server`` in this sandbox on ``cwd``, valid while the context lasts
        (a narrower network is served on a proxy socket of its own until then)."""
        async with self.sandbox.networked(self.network) as confined:
            env = {**confined.environment(cwd), **server.env}
            unset = [name for name in DEFAULT_INHERITED_ENV_VARS if name not in env]
            argv = confined.program_argv(cwd, [server.command, *server.args], unset=unset)
            yield StdioServerParameters(command=argv[0], args=argv[1:], env=env, cwd=cwd)


class McpServerGone(RuntimeError):
    """The server is not connected (or the connection broke during the call)."""


class McpConnection:
    """See the module docstring."""

    def __init__(
        self,
        name: str,
        server: McpServer,
        *,
        cwd: Path,
        policy: ConnectionPolicy,
        on_change: Callable[[], None] = lambda: None,
        sandbox: ServerSandbox | None = None,
    ) -> None:
        self.name = name
        self.server = server
        self.cwd = cwd
        self.sandbox = sandbox
        """Set for a sandboxed stdio server."""
        self.policy = policy
        self.on_change = on_change
        self.state: ConnectionState = "connecting"
        self.error = ""
        self.tools: list[mcp_types.Tool] = []
        self.connects = 0
        self.list_changes = 0
        self._client: Client | None = None
        self._lost = asyncio.Event()
        self._relist = asyncio.Event()
        self._connected = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    @property
    def transport(self) -> str:
        return self.server.type

    def start(self) -> None:
        if self._task is None:
            self._task = asyncio.create_task(self._run(), name=f"mcp-{self.name}")

    async def stop(self) -> None:
        self.state = "stopped"
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await self._task
            self._task = None
        self._client = None
        self._connected.clear()
        self.tools = []

    async def wait_connected(self, timeout_s: float) -> None:
        """Until the server is connected; :class:`McpServerGone` after ``timeout_s``."""
        try:
            await asyncio.wait_for(self._connected.wait(), timeout_s)
        except TimeoutError:
            raise McpServerGone(f"MCP server {self.name} is not connected ({self.state}: {self.error})") from None

    def _set(self, state: ConnectionState, error: str = "") -> None:
        self.state, self.error = state, error
        self.on_change()

    async def _run(self) -> None:
        backoff = self.policy.backoff_initial_s
        while True:
            try:
                async with self._open() as client:
                    self._client = client
                    await self._list_tools(client)
                    self.connects += 1
                    self._connected.set()
                    self._set("connected")
                    log.info("mcp_server_connected", server=self.name, tools=len(self.tools), cwd=str(self.cwd))
                    backoff = self.policy.backoff_initial_s
                    await self._watch(client)
                    error = "the connection was lost"
            except asyncio.CancelledError:
                raise
            except BaseException as failure:  # an ExceptionGroup from the SDK's task groups, OSError, MCPError…
                error = _describe(failure)
            self._client = None
            self._connected.clear()
            self.tools = []
            self._set("restarting", error)
            log.warning("mcp_server_lost", server=self.name, error=error, retry_in_s=backoff)
            await asyncio.sleep(backoff)
            backoff = min(backoff * 2, self.policy.backoff_max_s)

    @contextlib.asynccontextmanager
    async def _open(self) -> AsyncIterator[Client]:
        self._lost.clear()
        self._relist.clear()
        server = self.server
        async with contextlib.AsyncExitStack() as stack:
            target: Any
            if isinstance(server, HttpServer):
                http = await stack.enter_async_context(create_mcp_http_client(headers=dict(server.headers)))
                target = streamable_http_client(server.url, http_client=http)
            elif self.sandbox is not None:
                target = await stack.enter_async_context(self.sandbox.parameters(server, self.cwd))
            else:
                target = StdioServerParameters(command=server.command, args=server.args, env=server.env, cwd=self.cwd)
            client = Client(
                target,
                mode="auto",
                cache=None,
                message_handler=self._on_message,
                list_roots_callback=self._roots,
                read_timeout_seconds=None,
            )
            async with asyncio.timeout(self.policy.connect_timeout_s):
                await stack.enter_async_context(client)
            yield client

    async def _watch(self, client: Client) -> None:
        """Return when the connection is lost; list the tools again when the server says they changed."""
        listener = None
        if client.protocol_version in MODERN_PROTOCOL_VERSIONS and _lists_changes(client):
            listener = asyncio.create_task(self._listen(client))
        try:
            while not self._lost.is_set():
                relist = asyncio.create_task(self._relist.wait())
                lost = asyncio.create_task(self._lost.wait())
                done, _ = await asyncio.wait({relist, lost}, timeout=self.policy.ping_interval_s)
                relist.cancel()
                lost.cancel()
                if self._lost.is_set():
                    return
                if relist in done:
                    self._relist.clear()
                    self.list_changes += 1
                    await self._list_tools(client)
                    log.info("mcp_tools_changed", server=self.name, tools=[tool.name for tool in self.tools])
                    self.on_change()
                    continue
                async with asyncio.timeout(self.policy.connect_timeout_s):
                    await _probe(client)
        finally:
            if listener is not None:
                listener.cancel()
                with contextlib.suppress(BaseException):
                    await listener

    async def _listen(self, client: Client) -> None:
        with contextlib.suppress(Exception):
            async with client.listen(tools_list_changed=True) as events:
                async for _event in events:
                    self._relist.set()

    async def _list_tools(self, client: Client) -> None:
        tools: list[mcp_types.Tool] = []
        cursor: str | None = None
        while True:
            page = await client.list_tools(cursor=cursor)
            tools.extend(page.tools)
            cursor = page.next_cursor
            if not cursor:
                break
        self.tools = tools

    async def _on_message(self, message: IncomingMessage) -> None:
        if isinstance(message, mcp_types.ToolListChangedNotification):
            self._relist.set()

    async def _roots(self, context: ClientRequestContext) -> mcp_types.ListRootsResult:
        """The server's one root: its working directory."""
        return mcp_types.ListRootsResult(roots=[mcp_types.Root(uri=self.cwd.as_uri(), name=self.cwd.name or "/")])

    async def call(self, tool: str, arguments: JsonObject, on_progress: Callable[[McpProgress], None]) -> JsonObject:
        """``tools/call``; the result as JSON. Cancelling the awaiting task cancels the call on the server
        (the SDK sends ``notifications/cancelled``). :class:`McpServerGone` when the connection is down or breaks."""
        client = self._client
        if client is None:
            raise McpServerGone(f"MCP server {self.name} is not connected ({self.state}: {self.error})")

        async def report(progress: float, total: float | None, message: str | None) -> None:
            on_progress(McpProgress(progress, total, message))

        try:
            result = await client.call_tool(tool, dict(arguments), progress_callback=report)
        except asyncio.CancelledError:
            raise
        except Exception as error:
            if self._client is not client or not await self._alive(client):
                self._lost.set()
                raise McpServerGone(f"MCP server {self.name} went away during the call: {_describe(error)}") from error
            raise
        dumped: JsonObject = result.model_dump(mode="json", by_alias=True, exclude_none=True)
        return dumped

    async def _alive(self, client: Client) -> bool:
        try:
            async with asyncio.timeout(min(self.policy.connect_timeout_s, 5.0)):
                await _probe(client)
        except Exception:
            return False
        return True

    def status(self) -> JsonObject:
        return {"state": self.state, "error": self.error, "tools": len(self.tools), "connects": self.connects}


async def _probe(client: Client) -> None:
    """A request that fails when the connection is gone: ``ping``; on 2026-07-28, which removed it, ``tools/list``
    (the session answers ``server/discover`` from what it kept, without asking the server)."""
    if client.protocol_version in MODERN_PROTOCOL_VERSIONS:
        await client.list_tools()
    else:
        await client.session.send_ping()


def _lists_changes(client: Client) -> bool:
    tools = client.server_capabilities.tools
    return bool(tools is not None and tools.list_changed)


def _describe(failure: BaseException) -> str:
    """One line for a failure: an exception group's first leaf."""
    while isinstance(failure, BaseExceptionGroup) and failure.exceptions:
        failure = failure.exceptions[0]
    text = str(failure) or type(failure).__name__
    return f"{type(failure).__name__}: {text}" if str(failure) else text
