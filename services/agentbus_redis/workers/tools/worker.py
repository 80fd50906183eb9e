"""The tool-execution worker: competing consumers of the tool-job stream.

A job is the tool calls of one assistant reply. Each job runs in a slot of its own (``runtime/slots.py``:
up to ``max_concurrent_jobs`` at once, a slot refilled the moment its job ends, the job's entry acked
then), so one long call does not idle the other slots. The worker runs a job's calls with the executor (R8.5 order:
concurrency-safe calls in parallel, the others one by one), and sends every progress message and
result back through the session's ingress shard, each with an idempotency key (``tool_result:<id>``)
so a job that is re-run after a crash is applied once. Before running it skips calls that already have
a result and jobs whose assistant message was tombstoned (a retracted tool_use never runs). A call that
is not read-only is claimed for the job's attempt right before it starts (``Topology.tool_runs``): a
re-run finds it claimed by the dead attempt — it may have run, its result not yet applied — and answers
it with the missing-result placeholder rather than run it twice (at most once, like an approved call).

A job can outlive the reclaim idle time, so while it runs the worker keeps its entry fresh with
``XCLAIM … JUSTID`` (no delivery is counted); only a dead worker's job is reclaimed by another.
Interrupts arrive on a pub/sub channel (and are re-checked from the session's interrupt key when a job
starts), and reach the executor as an ``asyncio.Event``.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import secrets
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field, replace

import redis.asyncio as aioredis
import structlog

from agentbus_redis.agents.ids import is_child_session
from agentbus_redis.bus.events import (
    IngressEnvelope,
    ToolJobAbandoned,
    ToolProgressReport,
    ToolResultReport,
    parse_tool_job,
)
from agentbus_redis.bus.interrupts import InterruptReason, parse_interrupt_mark
from agentbus_redis.bus.ledger import tool_result_ids_of
from agentbus_redis.clock import Clock, utc_now
from agentbus_redis.confinement.network import NetworkPolicy
from agentbus_redis.confinement.session_network import InvalidSessionNetwork, session_network_policy
from agentbus_redis.ids import IdSource, random_uuid
from agentbus_redis.messages.content import ToolUseBlock
from agentbus_redis.messages.kinds import ProgressMessage, UserMessage
from agentbus_redis.observability.metrics import record_traceparent_invalid
from agentbus_redis.observability.tracing import WorkerTracer, continue_trace
from agentbus_redis.permissions.decide import PermissionContext
from agentbus_redis.runtime.codec import decode_entry, signed_entry_fields
from agentbus_redis.runtime.consumer import BatchHandler, BatchOutcome, Poison
from agentbus_redis.runtime.slots import JobSlots
from agentbus_redis.streams.entries import EntryKey, StreamEntry
from agentbus_redis.streams.topology import TOOLS_GROUP, Topology
from agentbus_redis.subagents.launcher import enter_agent_job
from agentbus_redis.tools.tool import ToolContext
from agentbus_redis.workers.tools.approvals import AnyJob, ApprovalGate, JobPlan, carries_decision
from agentbus_redis.workers.tools.executor import ToolInterrupt, ToolTimeouts, execute_tool_uses
from agentbus_redis.workers.tools.registry import ToolRegistry
from agentbus_redis.workers.tools.sessions import SessionTools
from agentbus_redis.workers.tools.tool_spans import ToolCallSpans

log = structlog.get_logger(__name__)

TOOL_RUNS_TTL_MS = 24 * 3600 * 1000
"""How long a side-effecting call's run claim is kept: far longer than any redelivery of its job."""


@dataclass(slots=True)
class ToolWorkerStats:
    jobs: int = 0
    jobs_skipped_retracted: int = 0
    calls_skipped_answered: int = 0
    results: int = 0
    progress: int = 0


@dataclass(slots=True)
class _Running:
    session_id: str
    dispatched_ms: int
    interrupt: ToolInterrupt = field(default_factory=ToolInterrupt)


class ToolWorker:
    """Runs tool jobs; see the module docstring."""

    def __init__(
        self,
        redis: aioredis.Redis,
        topology: Topology,
        *,
        consumer: str,
        registry: ToolRegistry,
        permissions: PermissionContext,
        timeouts: ToolTimeouts,
        keepalive_s: float,
        internal_key: bytes,
        slots: JobSlots,
        approvals: ApprovalGate | None = None,
        clock: Clock = utc_now,
        ids: IdSource = random_uuid,
        tracer: WorkerTracer | None = None,
    ) -> None:
        self.redis = redis
        self.tracer = tracer or WorkerTracer("tools")
        """Makes each call's ``execute_tool`` span (an invalid traceparent is counted once, in :meth:`_run`)."""
        self.slots = slots
        self.topology = topology
        self.consumer = consumer
        self.registry = registry
        self.permissions = permissions
        self.timeouts = timeouts
        self.keepalive_s = keepalive_s
        self.internal_key = internal_key
        """Signs every result and progress entry: only a tool worker answers a dispatched call."""
        self.clock = clock
        self.ids = ids
        self.stats = ToolWorkerStats()
        self.approvals = approvals
        """Parks calls that ask for a person and runs their decisions (agent-loop.md §H)."""
        self._running: dict[EntryKey, _Running] = {}
        """Running jobs by their entry's (stream, id): every shard's job stream feeds this worker."""
        self.session_permissions: Callable[[str], Awaitable[PermissionContext]] | None = None
        """Sub-agents (subagents/permissions.py): a child session's calls are decided in its own mode."""
        self.session_tools: SessionTools | None = None
        """Per-session workspaces: a job's tools are confined to its session's workspace (else ``registry``'s)."""
        self.sandbox_network: NetworkPolicy | None = None
        """The deployment's network policy when sandboxed commands have one (the proxy runs): each job's
        session may narrow it in its config (``SessionModelConfig.sandbox_network``), read with the job."""

    def handler(self) -> BatchHandler:
        return self.handle

    def interrupt_session(self, session_id: str, reason: InterruptReason, at_ms: int | None = None) -> None:
        """Interrupt every running job of ``session_id`` dispatched before ``at_ms`` (all when None), for
        ``reason`` (what of its running calls stops: bus/interrupts.py)."""
        for running in self._running.values():
            if running.session_id == session_id and (at_ms is None or running.dispatched_ms <= at_ms):
                running.interrupt.interrupt(reason)

    async def interrupt_marked(self, session_id: str) -> None:
        """The interrupts channel named ``session_id``: interrupt its running jobs for the reason on its mark
        (ingestion sets the mark in the same write, before it publishes). Unreadable (Redis away), the jobs are
        still interrupted, as ``interrupt``: the calls not started are rejected, the ``block`` ones run on. Every
        tool worker hears every interrupt: one with no job of the session running reads nothing."""
        if not any(running.session_id == session_id for running in self._running.values()):
            return
        reason: InterruptReason = "interrupt"
        try:
            raw = await self.redis.get(self.topology.interrupt(session_id))
        except aioredis.RedisError as error:
            log.warning("interrupt_reason_unread", session_id=session_id, error=str(error))
        else:
            reason = parse_interrupt_mark(raw).reason if raw is not None else reason
        self.interrupt_session(session_id, reason)

    async def handle(self, entries: list[StreamEntry]) -> BatchOutcome:
        """Start each job in a slot and return once a slot is free; the jobs ack their own entries
        when they end (only poison is settled by the consumer)."""
        poison: dict[str, Poison] = {}
        for entry in entries:
            if self.slots.holds(entry):
                continue  # re-read (our pending list after a reconnect) while its job runs
            job = self.approvals.decode(entry) if self.approvals else decode_entry(entry, parse_tool_job)
            if isinstance(job, Poison):
                poison[entry.entry_id] = job
            else:
                await self.slots.start(entry, functools.partial(self._run, entry, job))
        await self.slots.until_free()
        return BatchOutcome(ack=(), poison=poison)

    async def _run(self, entry: StreamEntry, job: AnyJob) -> None:
        self.stats.jobs += 1
        pipe = self.redis.pipeline(transaction=False)
        pipe.sismember(self.topology.retracted(job.session_id), job.assistant_uuid)
        pipe.smismember(self.topology.answered(job.session_id), [call.id for call in job.tool_uses])
        pipe.get(self.topology.interrupt(job.session_id))
        if self.sandbox_network is not None:
            pipe.get(self.topology.session_config(job.session_id))
        retracted, answered, interrupted_at, *config = await pipe.execute()
        if retracted:
            self.stats.jobs_skipped_retracted += 1
            return
        calls = [call for call, done in zip(job.tool_uses, answered, strict=True) if not done]
        self.stats.calls_skipped_answered += len(job.tool_uses) - len(calls)
        if not calls and not carries_decision(job):  # a decision is recorded even for an answered call
            return
        permissions = (
            self.permissions if self.session_permissions is None else await self.session_permissions(job.session_id)
        )
        registry = self.registry
        if self.session_tools is not None:
            registry, workspace = self.session_tools.for_session(job.session_id)
            permissions = replace(permissions, workspace_root=str(workspace.root))
        # Continue the job's trace: results and progress carry this worker's span as their parent.
        spans = ToolCallSpans(self.tracer, job.traceparent, conversation_id=job.session_id)
        span = continue_trace(job.traceparent, on_invalid=lambda _error: record_traceparent_invalid("tools"))
        job = job.model_copy(update={"traceparent": span.traceparent})
        log.info(
            "tool_job_started",
            session_id=job.session_id,
            assistant_uuid=job.assistant_uuid,
            tools=[call.name for call in calls],
            trace_id=span.trace_id,
            span_id=span.span_id,
        )
        context = self._call_context(job.session_id, config[0] if config else None)
        running = _Running(job.session_id, job.dispatched_ms)
        mark = parse_interrupt_mark(interrupted_at) if interrupted_at is not None else None
        if mark is not None and mark.at_ms >= job.dispatched_ms:
            running.interrupt.interrupt(mark.reason)
        self._running[entry.key] = running
        keepalive = asyncio.create_task(self._keep_claimed(entry))
        ingress = self.topology.ingress_for(job.session_id)
        agent_job = enter_agent_job(job)  # an Agent call starts a child and answers later (subagents)
        try:
            plan = JobPlan(calls, permissions)
            if self.approvals is not None:  # §H: asking calls are parked, decided ones carried out
                plan = await self.approvals.plan(
                    job, calls, permissions, interrupted=running.interrupt.is_set(), registry=registry
                )
            for answered in plan.answered:
                await self.redis.xadd(ingress, signed_entry_fields(self._envelope(job, answered), self.internal_key))  # type: ignore[arg-type]
            async for message in execute_tool_uses(
                plan.run,
                assistant_uuid=job.assistant_uuid,
                registry=registry,
                permissions=plan.permissions,
                timeouts=self.timeouts,
                interrupt=running.interrupt,
                clock=self.clock,
                ids=self.ids,
                spans=spans,
                is_subagent=is_child_session(job.session_id),
                run_claim=functools.partial(self._claim_run, job.session_id, f"{self.consumer}:{secrets.token_hex(8)}"),
                context=context,
            ):
                if agent_job.deferred(message):
                    continue
                fields = signed_entry_fields(self._envelope(job, plan.decorate(message)), self.internal_key)
                await self.redis.xadd(ingress, fields)  # type: ignore[arg-type]
        finally:
            keepalive.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await keepalive
            self._running.pop(entry.key, None)

    def _call_context(self, session_id: str, raw_config: bytes | None) -> ToolContext | None:
        """The facts of this job every call starts from: the session's sandbox network (None: nothing to add)."""
        if self.sandbox_network is None:
            return None
        try:
            policy = session_network_policy(self.sandbox_network, raw_config)
        except InvalidSessionNetwork as refused:
            log.warning("sandbox_network_refused", session_id=session_id, error=str(refused))
            return ToolContext(tool_use_id="", sandbox_network_refused=str(refused))
        return ToolContext(tool_use_id="", sandbox_network=policy)

    async def _claim_run(self, session_id: str, attempt: str, call: ToolUseBlock) -> bool:
        """Claim ``call`` for this attempt of its job; False when an earlier attempt started it."""
        key = self.topology.tool_runs(session_id)
        pipe = self.redis.pipeline(transaction=True)
        pipe.hsetnx(key, call.id, attempt)
        pipe.hget(key, call.id)
        pipe.pexpire(key, TOOL_RUNS_TTL_MS)
        _, holder, _ = await pipe.execute()
        if holder is not None and holder.decode() != attempt:
            log.warning("tool_call_started_before", session_id=session_id, tool_use_id=call.id, by=holder.decode())
            return False
        return True

    def _envelope(self, job: AnyJob, message: ProgressMessage | UserMessage) -> IngressEnvelope:
        if isinstance(message, ProgressMessage):
            self.stats.progress += 1
            return IngressEnvelope(
                session_id=job.session_id,
                idempotency_key=f"tool_progress:{message.uuid}",
                payload=ToolProgressReport(message=message),
                traceparent=job.traceparent,
            )
        self.stats.results += 1
        answered = ",".join(tool_result_ids_of(message)) or message.uuid
        return IngressEnvelope(
            session_id=job.session_id,
            idempotency_key=f"tool_result:{answered}",
            payload=ToolResultReport(message=message),
            traceparent=job.traceparent,
        )

    async def _keep_claimed(self, entry: StreamEntry) -> None:
        """Reset the entry's idle time while the job runs, so it is not reclaimed from a live worker."""
        while True:
            await asyncio.sleep(self.keepalive_s)
            with contextlib.suppress(aioredis.RedisError):
                await self.redis.xclaim(
                    entry.stream, TOOLS_GROUP, self.consumer, min_idle_time=0, message_ids=[entry.entry_id], justid=True
                )


def abandoned_job_envelope(job: AnyJob, reason: str) -> IngressEnvelope:
    """Placeholder rule for a dead-lettered job (its workers kept dying): ingestion answers its calls."""
    tool_use_ids = [call.id for call in job.tool_uses]
    return IngressEnvelope(
        session_id=job.session_id,
        idempotency_key=f"tool_job_abandoned:{job.assistant_uuid}:{','.join(tool_use_ids)}",
        payload=ToolJobAbandoned(assistant_uuid=job.assistant_uuid, tool_use_ids=tool_use_ids, reason=reason),
        traceparent=job.traceparent,
    )
