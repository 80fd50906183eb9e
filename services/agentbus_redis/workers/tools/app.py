"""The tool-execution worker process: ``agentbus worker tools`` (run as many as you like)."""

from __future__ import annotations

import asyncio
import contextlib
import tempfile
from collections.abc import Callable, Mapping
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

import structlog

from agentbus_redis.agents.send_message import SEND_MESSAGE_TOOL_NAME
from agentbus_redis.agents.tool import AGENT_TOOL_NAME
from agentbus_redis.config.settings import ToolSettings
from agentbus_redis.confinement.network import InvalidDomainPattern, NetworkPolicy
from agentbus_redis.mcp.config import McpConfigError, McpSandboxOptions, McpServer, server_sandbox
from agentbus_redis.observability.metrics import instrument_handler, set_tool_pool
from agentbus_redis.permissions.decide import PermissionContext
from agentbus_redis.runtime.codec import signed_entry_fields
from agentbus_redis.runtime.consumer import BatchConsumer, BatchOutcome, Output, Poison
from agentbus_redis.runtime.lane_worker import ensure_groups
from agentbus_redis.runtime.periodic import PeriodicTask
from agentbus_redis.runtime.slots import JobSlots
from agentbus_redis.runtime.stream_admin import TOOLS_ABANDONED_GROUP as ABANDONED_GROUP
from agentbus_redis.sandbox.proxy import DomainProxy
from agentbus_redis.sandbox.runner import Sandbox, sandbox_for
from agentbus_redis.sandbox.workspaces import SessionWorkspaces
from agentbus_redis.stores.tool_catalog import ToolCatalogPublisher, read_tool_catalog
from agentbus_redis.streams.deadletter import DeadLetter
from agentbus_redis.streams.entries import StreamEntry, field_bytes
from agentbus_redis.streams.topology import TOOLS_GROUP
from agentbus_redis.subagents.launcher import AgentTool
from agentbus_redis.subagents.permissions import SessionPermissions
from agentbus_redis.subagents.send_message import SendMessageTool
from agentbus_redis.subagents.setup import agent_setup
from agentbus_redis.subagents.store import AgentStore
from agentbus_redis.tools.tool import AnyTool
from agentbus_redis.workers.process import WorkerContext
from agentbus_redis.workers.tools.approvals import ApprovalGate
from agentbus_redis.workers.tools.executor import ToolTimeouts
from agentbus_redis.workers.tools.loading import ToolLoadError, load_tools
from agentbus_redis.workers.tools.mcp.config_files import read_mcp_configs
from agentbus_redis.workers.tools.registry import DuplicateToolName, ToolRegistry, default_registry
from agentbus_redis.workers.tools.sessions import SessionTools
from agentbus_redis.workers.tools.worker import ToolWorker, abandoned_job_envelope
from agentbus_redis.workers.tools.workspace import Workspace

APPROVALS_GAUGE_INTERVAL_S = 5.0
WORKSPACE_CLEANUP_INTERVAL_S = 600.0
SANDBOX_OFF_NOTE = (
    "OFF (AGENTBUS_TOOLS__SANDBOX=off): Bash runs unsandboxed with the worker's rights, environment (its Redis "
    "credentials and internal key) and network"
)

if TYPE_CHECKING:
    from agentbus_redis.workers.tools.mcp.connection import ServerSandbox
    from agentbus_redis.workers.tools.mcp.servers import McpServers

log = structlog.get_logger(__name__)


class ToolRuntime:
    """Competing consumer of tool jobs — of every shard's job stream, one consumer each (a job stream per
    shard keeps each batch of the ordered lanes in one Cluster slot), sharing the worker's job slots — plus
    the watchers that answer dead-lettered jobs."""

    def __init__(self, context: WorkerContext) -> None:
        settings = context.settings
        self.context = context
        self.topology = context.topology
        workspace_root = settings.tools.workspace.resolve()
        workspace_root.mkdir(parents=True, exist_ok=True)
        permissions = PermissionContext.from_settings(
            workspace_root=str(workspace_root),
            allow=settings.tools.allow,
            deny=settings.tools.deny,
            ask=settings.tools.ask,
            mode=settings.tools.permission_mode,
            ask_policy=settings.tools.ask_policy,
        )
        claim_idle_ms = settings.consumer.claim_min_idle_ms
        self.slots = JobSlots(context.redis, group=TOOLS_GROUP, size=settings.tools.max_concurrent_jobs)
        mcp_config = read_mcp_configs(settings.tools.mcp_config)
        self.sandboxed_mcp = {
            name: options
            for name, server in mcp_config.items()
            if (options := server_sandbox(server, default=settings.tools.mcp_sandbox)) is not None
        }
        """The stdio MCP servers that run under the sandbox (by their entry, or the deployment's default)."""
        # Bash and the sandboxed MCP servers are what runs in the sandbox: a pool with neither checks none.
        self.sandbox = sandbox_for(settings.tools) if settings.tools.builtins or self.sandboxed_mcp else None
        self.proxy = self._network_proxy()
        self.workspaces = SessionWorkspaces(
            workspace_root,
            settings.tools.workspace_scope,
            owner=self.sandbox.owner if self.sandbox is not None else None,
        )
        self.mcp = mcp_servers(
            settings.tools,
            mcp_config,
            workspace_root,
            on_change=self._mcp_changed,
            sandbox=self.sandbox,
            sandboxed=self.sandboxed_mcp,
            network=self.proxy.policy if self.proxy is not None else NetworkPolicy(),
            server_dir=self.workspaces.server_dir,
        )
        builtin = default_registry(Workspace.at(workspace_root), self.sandbox)
        self.agent_tool = AgentTool(
            context.redis,
            self.topology,
            setup=agent_setup(settings.agents, cwd=str(workspace_root)),
            permissions=permissions,
            internal_key=settings.require_internal_key(),
            tool_names=lambda: _catalog_names(context, builtin),
            workspace_for=lambda session_id: str(self.workspaces.for_session(session_id)),
        )
        loaded = load_tools(settings.tools.modules, entry_points=settings.tools.entry_points)
        agent_tools: list[AnyTool] = [self.agent_tool, SendMessageTool(self.agent_tool)]
        if not settings.tools.builtins:
            agent_tools = []
        mcp = self.mcp
        self.session_tools = SessionTools(
            self.workspaces,
            sandbox=self.sandbox,
            shared=[*agent_tools, *loaded],
            builtins=settings.tools.builtins,
            sources=(lambda root: [mcp.source(root)]) if mcp is not None else None,
        )
        try:
            self.registry = registry = self.session_tools.template()
        except DuplicateToolName as error:
            raise ToolLoadError(f"tools: {error}") from error
        if not registry.names and mcp is None:
            raise ToolLoadError("tools: this worker would run no tool (built-ins off, no tool loaded, no MCP server)")
        self.pool = settings.tools.pool
        set_tool_pool(self.pool)
        self.approvals = ApprovalGate(
            context.redis,
            self.topology,
            registry=registry,
            internal_key=settings.require_internal_key(),
            consumer=context.owner,
            timeout_s=settings.tools.approval_timeout_s,
        )
        self.catalog = ToolCatalogPublisher(
            context.redis,
            self.topology,
            worker=context.owner,
            tools=registry.definitions(),
            pool=self.pool,
            refresh_s=settings.tools.catalog_refresh_s,
            ttl_s=settings.tools.catalog_ttl_s,
        )
        self.worker = ToolWorker(
            context.redis,
            self.topology,
            consumer=context.owner,
            registry=registry,
            permissions=permissions,
            timeouts=ToolTimeouts(default_s=settings.tools.timeout_s),
            keepalive_s=max(claim_idle_ms / 3000, 0.05),
            internal_key=settings.require_internal_key(),
            slots=self.slots,
            approvals=self.approvals,
        )
        # One entry per read: the handler takes an entry only when a slot is free to run it (slots.py).
        # The reclaim sweep scans as much of the pending list as it did when a read took a slot's worth.
        base = context.consumer_config()
        handler = instrument_handler("tools", self.worker.handle)
        config = replace(base, count=1, claim_max_pages=base.claim_max_pages * settings.tools.max_concurrent_jobs)
        self.jobs = [
            BatchConsumer(
                context.redis, stream=stream, group=TOOLS_GROUP, consumer=context.owner, handler=handler, config=config
            )
            for stream in self.topology.tool_job_streams(self.pool)
        ]
        self.worker.session_permissions = SessionPermissions(AgentStore(context.redis, self.topology), permissions)
        self.worker.session_tools = self.session_tools
        if self.proxy is not None and settings.tools.builtins:  # a session may narrow its Bash's list (per job)
            self.worker.sandbox_network = self.proxy.policy
        self.slots.stats = self.jobs[0].stats  # the slots' acks and failures show in the first shard's metrics
        self.abandoned = [
            BatchConsumer(
                context.redis,
                stream=jobs.dead_letter_stream,
                group=ABANDONED_GROUP,
                consumer=context.owner,
                handler=self._answer_abandoned,
                config=context.consumer_config(),
            )
            for jobs in self.jobs
        ]
        context.broker.subscriber(channel=self.topology.interrupts_channel)(self._on_interrupt)
        self.approvals_gauge = PendingApprovalsGauge(self.approvals)
        retention_s = settings.tools.workspace_retention_s
        self.workspace_cleanup = (
            IdleWorkspaceCleanup(self.workspaces, retention_s)
            if retention_s > 0 and self.workspaces.scope != "shared"
            else None
        )
        self.sandbox_state = "not checked yet"
        self.mcp_sweep = McpIdleSessions(self.mcp) if self.mcp is not None else None
        self._catalog_dirty = asyncio.Event()
        self._catalog_writer: asyncio.Task[None] | None = None
        self._stopping = False

    def _mcp_changed(self) -> None:
        """An MCP server connected, was lost or changed its tools: the catalog says so at once."""
        if self._stopping or not hasattr(self, "catalog"):
            return
        self._catalog_dirty.set()
        if self._catalog_writer is None or self._catalog_writer.done():
            self._catalog_writer = asyncio.create_task(self._write_catalog())

    async def _write_catalog(self) -> None:
        while self._catalog_dirty.is_set() and not self._stopping:
            self._catalog_dirty.clear()
            self.catalog.tools = self.registry.definitions()
            self.catalog.mcp_servers = self.mcp.statuses() if self.mcp is not None else []
            try:
                await self.catalog.publish()
            except Exception as error:  # Redis away: the periodic refresh writes the same entry later
                log.warning("tool_catalog_publish_failed", error=repr(error))

    def _network_proxy(self) -> DomainProxy | None:
        """The allow-listing proxy of sandboxed commands, when the deployment allow-lists domains (its socket in
        a directory of the worker's own; the sandbox mounts it)."""
        network = self.context.settings.tools.sandbox_network
        servers_reach_out = any(options.allowed_domains for options in self.sandboxed_mcp.values())
        if not network.allowed_domains or not (self.context.settings.tools.builtins or servers_reach_out):
            return None  # no domain allowed, or nothing sandboxed would use one (no Bash, no server asks)
        if self.sandbox is None:
            log.warning("sandbox_network_ignored", detail="the sandbox is off: commands have the worker's network")
            return None
        proxy = DomainProxy(network.policy(), Path(tempfile.mkdtemp(prefix="agentbus-proxy-")) / "proxy.sock")
        self.sandbox = self.sandbox.with_proxy(proxy, network.bridge_python)
        return proxy

    async def _on_interrupt(self, session_id: str) -> None:
        """An interrupt for ``session_id`` (published by ingestion): reach its running jobs now."""
        await self.worker.interrupt_marked(session_id)

    async def _answer_abandoned(self, entries: list[StreamEntry]) -> BatchOutcome:
        """Placeholder rule: a job that was dead-lettered gets its calls answered by ingestion."""
        outputs: list[Output] = []
        poison: dict[str, Poison] = {}
        for entry in entries:
            letter = DeadLetter.from_stream_fields(
                entry.stream, entry.entry_id, {field_bytes(k): v for k, v in entry.fields.items()}
            )
            original = StreamEntry(letter.stream, letter.entry_id, dict(letter.fields), letter.delivery_count)
            job = self.approvals.decode(original)
            if isinstance(job, Poison):
                poison[entry.entry_id] = job
                continue
            envelope = abandoned_job_envelope(job, letter.reason)
            fields = signed_entry_fields(envelope, self.worker.internal_key)
            outputs.append(Output(self.topology.ingress_for(job.session_id), fields))
        return BatchOutcome(outputs=outputs, poison=poison)

    async def start(self) -> None:
        if self.proxy is not None:
            await self.proxy.start()
        await self._check_sandbox()
        await ensure_groups(self.context.redis, self.groups())
        if self.mcp is not None:
            self.catalog.mcp_servers = self.mcp.statuses()
            self.mcp.start()  # each server's tools join the catalog when it connects (_mcp_changed)
            if self.mcp_sweep is not None:
                self.mcp_sweep.start()
        await self.catalog.publish()  # the model is offered these tools from now on
        for consumer in self.consumers():
            consumer.start()
        self.catalog.start_refreshing()  # and for as long as this worker lives: the entry expires otherwise
        self.approvals_gauge.start()
        if self.workspace_cleanup is not None:
            self.workspace_cleanup.start()

    async def _check_sandbox(self) -> None:
        """Refuse to start with a sandbox that does not work; say loudly when it is off."""
        if not self.context.settings.tools.builtins and not self.sandboxed_mcp:
            self.sandbox_state = "not used: this worker runs no built-in tool (no Bash) and no sandboxed MCP server"
            return
        if self.sandbox is None:
            self.sandbox_state = SANDBOX_OFF_NOTE
            if self.sandboxed_mcp:
                self.sandbox_state += f"; the MCP servers {', '.join(sorted(self.sandboxed_mcp))} too"
            log.warning("sandbox_off", detail=self.sandbox_state)
            return
        version = await self.sandbox.check(self.workspaces.check_dir())
        network = self.context.settings.tools.sandbox_network
        domains = ", ".join(network.allowed_domains) if self.proxy is not None else None
        self.sandbox_state = f"on: {version} ({self.sandbox.bwrap}); network: " + (
            f"only through the proxy, to {domains}" if domains else "none"
        )
        if self.sandboxed_mcp:
            self.sandbox_state += f"; MCP servers sandboxed: {', '.join(sorted(self.sandboxed_mcp))}"
        log.info("sandbox_on", bwrap=self.sandbox.bwrap, version=version, runs_as=self.sandbox.owner, network=domains)

    def readiness_notes(self) -> list[tuple[str, bool, str]]:
        """Shown by ``/readyz``: whether commands run sandboxed (off is stated, not hidden), and each MCP server's
        state (a server marked required that is not connected makes the worker not ready)."""
        notes = [("sandbox", True, self.sandbox_state)]
        for status in self.mcp.statuses() if self.mcp is not None else []:
            connected = status.state == "connected"
            detail = f"{status.state}, {len(status.tools)} tools" if connected else f"{status.state}: {status.error}"
            notes.append((f"mcp:{status.name}", connected or not status.required, detail))
        return notes

    async def stop(self) -> None:
        """Stop reading, let the running jobs finish and ack (cancelled after the tool timeout: their
        entries stay pending and are redelivered)."""
        timeout_s = self.context.settings.tools.timeout_s
        await self.approvals_gauge.stop()
        if self.workspace_cleanup is not None:
            await self.workspace_cleanup.stop()
        self._stopping = True
        await self.catalog.withdraw()  # first: a stopping worker's tools are no longer offered
        self.slots.close()
        await asyncio.gather(*(jobs.stop(timeout_s=timeout_s) for jobs in self.jobs))
        await self.slots.finish(timeout_s=timeout_s)
        await asyncio.gather(*(abandoned.stop() for abandoned in self.abandoned))
        await self.agent_tool.outputs.close()
        if self.mcp_sweep is not None:
            await self.mcp_sweep.stop()
        if self.mcp is not None:
            await self.mcp.stop()
        if self.proxy is not None:
            await self.proxy.stop()
            with contextlib.suppress(OSError):
                self.proxy.socket_path.parent.rmdir()

    def consumers(self) -> list[BatchConsumer]:
        return [*self.jobs, *self.abandoned]

    def background_tasks(self) -> dict[str, asyncio.Task[None] | None]:
        """The loops that must run as long as the worker does (``/healthz`` fails when one ended)."""
        tasks = {"tool_catalog": self.catalog.task, "approvals_gauge": self.approvals_gauge.task}
        if self.workspace_cleanup is not None:
            tasks["workspace_cleanup"] = self.workspace_cleanup.task
        if self.mcp_sweep is not None:
            tasks["mcp_idle_sessions"] = self.mcp_sweep.task
        return tasks

    def groups(self) -> list[tuple[str, str]]:
        return [(jobs.stream, TOOLS_GROUP) for jobs in self.jobs] + [
            (abandoned.stream, ABANDONED_GROUP) for abandoned in self.abandoned
        ]


class PendingApprovalsGauge(PeriodicTask):
    """agentbus_approvals_pending: the store's count, read every few seconds (people answer anywhere)."""

    task_name = "approvals-gauge"
    failure_event = "approvals_gauge_refresh_failed"

    def __init__(self, approvals: ApprovalGate) -> None:
        super().__init__(APPROVALS_GAUGE_INTERVAL_S)
        self.approvals = approvals

    async def tick(self) -> None:
        await self.approvals.refresh_pending()


class IdleWorkspaceCleanup(PeriodicTask):
    """Removes the session workspaces left untouched for ``retention_s`` (on disk: in a thread)."""

    task_name = "workspace-cleanup"
    failure_event = "workspace_cleanup_failed"

    def __init__(self, workspaces: SessionWorkspaces, retention_s: float) -> None:
        super().__init__(min(max(retention_s / 4, 1.0), WORKSPACE_CLEANUP_INTERVAL_S))
        self.workspaces = workspaces
        self.retention_s = retention_s

    async def tick(self) -> None:
        await asyncio.to_thread(self.workspaces.remove_idle, self.retention_s)


class McpIdleSessions(PeriodicTask):
    """Closes the per-session MCP connections left unused for the configured idle time."""

    task_name = "mcp-idle-sessions"
    failure_event = "mcp_idle_sessions_failed"

    def __init__(self, servers: McpServers) -> None:
        super().__init__(min(max(servers.session_idle_s / 4, 1.0), 60.0))
        self.servers = servers

    async def tick(self) -> None:
        await self.servers.close_idle()


def mcp_servers(
    settings: ToolSettings,
    servers: Mapping[str, McpServer],
    root: Path,
    *,
    on_change: Callable[[], None],
    sandbox: Sandbox | None = None,
    sandboxed: Mapping[str, McpSandboxOptions] | None = None,
    network: NetworkPolicy | None = None,
    server_dir: Callable[[str], Path] | None = None,
) -> McpServers | None:
    """The worker's MCP servers (None without any), the ``sandboxed`` ones confined in ``sandbox`` (run bare
    when it is off) with their network narrowed from ``network`` (the deployment's); ``McpConfigError`` for a
    server whose sandbox asks for a domain the deployment does not allow or mounts the tools root."""
    if not servers:
        return None
    from agentbus_redis.workers.tools.mcp.connection import ConnectionPolicy  # the mcp SDK: only when configured
    from agentbus_redis.workers.tools.mcp.servers import McpServers

    confined = (
        server_sandboxes(sandbox, sandboxed or {}, network or NetworkPolicy(), settings, root)
        if sandbox is not None
        else {}
    )

    policy = ConnectionPolicy(
        connect_timeout_s=settings.mcp_connect_timeout_s,
        ping_interval_s=settings.mcp_ping_interval_s,
        backoff_initial_s=min(settings.mcp_backoff_initial_s, settings.mcp_backoff_max_s),
        backoff_max_s=settings.mcp_backoff_max_s,
    )
    return McpServers(
        servers,
        root=root,
        policy=policy,
        max_output_chars=settings.mcp_max_output_chars,
        session_idle_s=settings.mcp_session_idle_s,
        on_change=on_change,
        sandboxes=confined,
        server_dir=server_dir,
    )


def server_sandboxes(
    sandbox: Sandbox,
    sandboxed: Mapping[str, McpSandboxOptions],
    network: NetworkPolicy,
    settings: ToolSettings,
    root: Path,
) -> dict[str, ServerSandbox]:
    """Each sandboxed server's confinement: the worker's sandbox with its read-only paths (the deployment's
    and its own), under the deployment's network narrowed by its entry. Raises ``McpConfigError``."""
    from agentbus_redis.workers.tools.mcp.connection import ServerSandbox

    confined: dict[str, ServerSandbox] = {}
    for name, options in sandboxed.items():
        where = f"mcpServers.{name}.agentbus.sandbox"
        try:
            policy = network.narrowed(options.allowed_domains, options.denied_domains)
        except InvalidDomainPattern as error:
            raise McpConfigError(f"{where}.allowedDomains: {error}") from None
        paths = [*settings.mcp_sandbox_read_only_paths, *options.read_only_paths]
        for path in paths:
            resolved = Path(path).resolve()
            if resolved == root or resolved in root.parents or root in resolved.parents:
                raise McpConfigError(
                    f"{where}.readOnlyPaths: {path!r} holds or is inside the tools root {root} (every session's "
                    "workspace): mount the server's own installation only"
                )
        confined[name] = ServerSandbox(sandbox.with_read_only(paths), policy)
    return confined


async def _catalog_names(context: WorkerContext, builtin: ToolRegistry) -> list[str]:
    """The tool pool of a parent whose config names none (A3.4): every tool some live worker runs (the
    catalog the model is offered), else this worker's own."""
    names = [tool.name for tool in await read_tool_catalog(context.redis, context.topology)]
    return names or [*builtin.names, AGENT_TOOL_NAME, SEND_MESSAGE_TOOL_NAME]


def create(context: WorkerContext) -> ToolRuntime:
    return ToolRuntime(context)


def __getattr__(attribute: str) -> object:
    """``faststream run agentbus_redis.workers.tools.app:app``: the ASGI app, built from the environment on first
    use."""
    if attribute == "app":
        from agentbus_redis.workers.process import build_app

        return build_app("tools", create)[0]
    raise AttributeError(attribute)
