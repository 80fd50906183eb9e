"""From a child session to its parent: progress (A6), the final result (A5), cancellation (A8) and the
limits (A9), published into the parent's ingress as signed internal events (bus/internal_events.py).

Every publication is idempotent: the result's key is ``agent_result:<tool_use_id>`` (whoever answers
first — the child's end, a limit, a cancellation — is the one the parent's ledger applies; a later one is
a duplicate key), a progress message's ``agent_progress:<uuid>`` with a uuid derived from the child
message. The result is published BEFORE the child is marked ended, so a crash in between leaves a
running child that the sweep finds and answers again (a duplicate, dropped): nothing lost, nothing twice.

Progress is relayed after ingestion committed the child's batch; an ingestion worker killed in between
loses that relay. So the child keeps a cursor (``relayed_seq``): each relay starts where the last one
ended, filling a gap from the child's log first (in log order), and the parent is answered only once the
child's log is relayed up to its end (the sweep's recovered completions included).
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Sequence
from typing import Any

import redis.asyncio as aioredis
import structlog

from agentbus_redis.agents.ids import parse_child_session
from agentbus_redis.agents.progress import agent_progress, forwarded_shell_progress
from agentbus_redis.agents.record import ChildRecord, ChildStatus
from agentbus_redis.agents.results import (
    ParentResult,
    completed_result,
    cumulative_tokens,
    interrupted_result,
    tokens_exceeded,
    wall_time_exceeded,
)
from agentbus_redis.agents.turn import TurnOutcome, may_end_turn, shows_tool_activity, turn_outcome
from agentbus_redis.bus.events import (
    IngressEnvelope,
    Interrupt,
    LogEntry,
    ToolProgressReport,
    ToolResultReport,
    parse_log_entry,
)
from agentbus_redis.bus.ledger import tool_result_ids_of
from agentbus_redis.clock import Clock, epoch_ms, utc_now
from agentbus_redis.messages.content import ToolResultBlock
from agentbus_redis.messages.factories import create_user_message
from agentbus_redis.messages.kinds import AssistantMessage, Message, ProgressMessage, UserMessage
from agentbus_redis.runtime.codec import DATA_FIELD, signed_entry_fields
from agentbus_redis.runtime.key_calls import KeyCalls
from agentbus_redis.streams.topology import Topology
from agentbus_redis.subagents.background import notify_parent
from agentbus_redis.subagents.store import AgentStore
from agentbus_redis.subagents.task_events import TaskEvents

log = structlog.get_logger(__name__)

RECORD_CACHE_SIZE = 4096


class ChildRelay:
    """Publishes what a child owes its parent (see the module docstring)."""

    def __init__(
        self,
        redis: aioredis.Redis,
        topology: Topology,
        *,
        internal_key: bytes,
        clock: Clock = utc_now,
        now_ms: Callable[[], int] = epoch_ms,
    ) -> None:
        self.redis = redis
        self.topology = topology
        self.store = AgentStore(redis, topology)
        self.internal_key = internal_key
        self.clock = clock
        self.now_ms = now_ms
        self._records: OrderedDict[str, ChildRecord] = OrderedDict()
        self.tasks = TaskEvents(self._publish, self.child_entries, clock=clock, now_ms=now_ms)
        """A6.3 SDK task events (subagents/task_events.py)."""

    # -- reading ------------------------------------------------------------------------------

    async def record(self, child_session_id: str) -> tuple[ChildRecord, ChildStatus] | None:
        found = await self.store.record(child_session_id)
        if found is not None:
            self._records[child_session_id] = found[0]
            self._records.move_to_end(child_session_id)
            while len(self._records) > RECORD_CACHE_SIZE:
                self._records.popitem(last=False)
        return found

    async def _cached_record(self, child_session_id: str) -> ChildRecord | None:
        cached = self._records.get(child_session_id)
        if cached is not None:
            return cached
        found = await self.record(child_session_id)
        return found[0] if found is not None else None

    async def child_entries(self, child_session_id: str, upto_seq: int | None = None) -> list[LogEntry]:
        """The child's log entries in order (its own event stream: the canonical history), up to
        ``upto_seq`` when given."""
        rows: Any = await self.redis.xrange(self.topology.session_events(child_session_id))
        entries = [parse_log_entry(fields[DATA_FIELD.encode()]) for _, fields in rows]
        return [entry for entry in entries if upto_seq is None or entry.seq <= upto_seq]

    async def child_log(self, child_session_id: str, *, upto_seq: int | None = None) -> list[Message]:
        """The child's messages in log order, up to ``upto_seq`` when given."""
        return [entry.message for entry in await self.child_entries(child_session_id, upto_seq=upto_seq)]

    # -- publishing ---------------------------------------------------------------------------

    async def _publish(self, envelope: IngressEnvelope) -> None:
        fields = signed_entry_fields(envelope, self.internal_key)
        await self.redis.xadd(self.topology.ingress_for(envelope.session_id), fields)  # type: ignore[arg-type]

    async def _publish_together(self, envelopes: Sequence[IngressEnvelope]) -> None:
        """Entries of one session, written all or none (one script: one stream, one slot)."""
        calls = KeyCalls()
        for envelope in envelopes:
            calls.add_xadd(
                self.topology.ingress_for(envelope.session_id), signed_entry_fields(envelope, self.internal_key)
            )
        await calls.write(self.redis)

    async def answer_parent(self, record: ChildRecord, result: ParentResult, status: ChildStatus) -> bool:
        """Publish the parent call's result, then mark the child ended (see the module docstring). A
        background child's call was answered at launch: its parent gets a task notification (A5.4)."""
        if record.background:
            return await notify_parent(
                record,
                result,
                status,
                child_log=self.child_log,
                publish=self._publish,
                end=lambda ended, final: self.store.end(ended, final, self.now_ms()),
                now_ms=self.now_ms(),
            )
        block = ToolResultBlock(tool_use_id=record.parent_tool_use_id, content=result.content)
        if result.is_error:
            block = ToolResultBlock(tool_use_id=record.parent_tool_use_id, content=result.content, is_error=True)
        message = create_user_message(
            [block],
            clock=self.clock,
            tool_use_result=result.tool_use_result,
            source_tool_assistant_uuid=record.parent_assistant_uuid,
        )
        answer = IngressEnvelope(
            session_id=record.parent_session_id,
            idempotency_key=f"agent_result:{record.parent_tool_use_id}",
            payload=ToolResultReport(message=message),
        )
        # A6.3: the task_notification with it, in one transaction (the first answer also notifies).
        await self._publish_together([await self.tasks.notification(record, status), answer])
        ended = await self.store.end(record, status, self.now_ms())
        log.info(
            "agent_answered",
            parent_session_id=record.parent_session_id,
            child_session_id=record.session_id,
            agent_id=record.agent_id,
            status=status,
            first=ended,
        )
        return ended

    async def stop_child(self, record: ChildRecord) -> None:
        """Interrupt the child (A8.1: its model call and tools stop, its pending calls get the texts)."""
        await self._publish(
            IngressEnvelope(
                session_id=record.session_id,
                idempotency_key=f"agent_stop:{record.session_id}",
                payload=Interrupt(reason="user_cancel"),
            )
        )

    async def publish_progress(self, record: ChildRecord, entries: Sequence[LogEntry]) -> int:
        """A6.1 for the child's new log entries: the first user message (with the prompt), then every
        message with a tool_use or tool_result block."""
        published = 0
        for entry in entries:
            message = entry.message
            if isinstance(message, ProgressMessage):
                shell = forwarded_shell_progress(message, parent_tool_use_id=record.parent_tool_use_id)
                if shell is not None:
                    await self._publish_progress(record, shell)
                    published += 1
                continue
            first = isinstance(message, UserMessage) and (
                message.uuid == record.round_prompt_uuid if record.round_prompt_uuid else entry.seq == 1
            )
            if not (first or shows_tool_activity(message)):
                continue
            assert isinstance(message, UserMessage | AssistantMessage)
            progress = agent_progress(
                message,
                agent_id=record.agent_id,
                prompt=record.prompt if first else "",
                parent_tool_use_id=record.parent_tool_use_id,
                parent_message_id=record.parent_message_id,
                parent_assistant_uuid=record.parent_assistant_uuid,
                timestamp=self.clock(),
            )
            await self._publish_progress(record, progress)
            published += 1
        return published + await self.tasks.progress(record, entries)  # A6.3 task_progress

    async def relay_progress(self, record: ChildRecord, entries: Sequence[LogEntry]) -> int:
        """:meth:`publish_progress` for the entries past the child's cursor, a gap before them (a relay lost
        with a killed ingestion worker) filled from the child's log first; then the cursor moves on."""
        relayed = await self.store.relayed_seq(record.session_id)
        fresh = [entry for entry in entries if entry.seq > relayed]
        if not fresh:
            return 0
        if fresh[0].seq > relayed + 1:
            logged = await self.child_entries(record.session_id, upto_seq=fresh[0].seq - 1)
            gap = [entry for entry in logged if entry.seq > relayed]
            log.warning("agent_progress_gap_filled", child_session_id=record.session_id, entries=len(gap))
            fresh = gap + fresh
        published = await self.publish_progress(record, fresh)
        await self.store.set_relayed_seq(record.session_id, fresh[-1].seq)
        return published

    async def _publish_progress(self, record: ChildRecord, progress: ProgressMessage) -> None:
        await self._publish(
            IngressEnvelope(
                session_id=record.parent_session_id,
                idempotency_key=f"agent_progress:{progress.uuid}",
                payload=ToolProgressReport(message=progress),
            )
        )

    # -- deciding -----------------------------------------------------------------------------

    async def on_child_entries(self, child_session_id: str, entries: Sequence[LogEntry]) -> None:
        """A child's batch was logged: forward progress; when its turn may be over, or a reply ended
        (limits), look at its whole log."""
        record = await self._cached_record(child_session_id)
        if record is not None and any(_is_prompt(entry.message) for entry in entries):
            found = await self.record(child_session_id)  # a SendMessage round starts with a prompt (A4.4)
            record = found[0] if found is not None else None
        if record is None:
            return  # a session named like a child that no Agent call started: nothing to answer
        # A background child's call was answered at launch: its progress has no call to attach to (A5.3).
        published = 0 if record.background else await self.relay_progress(record, entries)
        log.debug("agent_relay", child_session_id=child_session_id, seqs=[e.seq for e in entries], progress=published)
        reply_ended = any(
            isinstance(entry.message, AssistantMessage) and entry.message.message.stop_reason is not None
            for entry in entries
        )
        if reply_ended or any(may_end_turn(entry.message) for entry in entries):
            # Judged on the log as far as relayed: the child's later entries (already logged, their relay
            # queued behind this one) must reach the parent as progress before its result does.
            await self.check(child_session_id, upto_seq=max(entry.seq for entry in entries))

    async def on_child_interrupted(self, child_session_id: str) -> None:
        """A8.1: a ``user_cancel`` interrupt reached the child: its parent's call is answered with the
        rejection (a no-op when the child had ended, e.g. because its parent's interrupt stopped it)."""
        found = await self.record(child_session_id)
        if found is not None and found[1] == "running":
            await self.answer_parent(found[0], interrupted_result(), "interrupted")

    async def check(
        self, child_session_id: str, *, now_ms: int | None = None, upto_seq: int | None = None
    ) -> ChildStatus:
        """Answer the parent if the child's turn is over (in its log up to ``upto_seq``) or it broke a
        limit; returns its status."""
        found = await self.record(child_session_id)
        if found is None:
            return "failed"
        record, status = found
        if status != "running":
            return status
        now = now_ms if now_ms is not None else self.now_ms()
        entries = await self.child_entries(child_session_id, upto_seq=upto_seq)
        outcome = turn_outcome([entry.message for entry in entries], since_uuid=record.round_prompt_uuid)
        if not record.background:
            await self.relay_progress(record, entries)  # the parent sees all progress before any result
        if outcome.state == "completed":
            await self.answer_parent(record, completed_result(record.facts, outcome.messages, now_ms=now), "completed")
            return "completed"
        if outcome.state == "interrupted":
            await self.answer_parent(record, interrupted_result(), "interrupted")
            return "interrupted"
        return await self._enforce_limits(record, outcome, now)

    async def _enforce_limits(self, record: ChildRecord, outcome: TurnOutcome, now: int) -> ChildStatus:
        if record.max_tokens is not None:
            used = cumulative_tokens(outcome.messages)
            if used > record.max_tokens:
                await self.stop_child(record)
                await self.answer_parent(record, tokens_exceeded(record.facts, record.max_tokens, used), "failed")
                return "failed"
        if now >= record.deadline_ms:
            await self.stop_child(record)
            limit_s = (record.deadline_ms - record.started_ms) / 1000
            await self.answer_parent(record, wall_time_exceeded(record.facts, limit_s), "failed")
            return "failed"
        return "running"

    async def cancel_children(self, parent_session_id: str, *, interrupted_at_ms: int) -> int:
        """A8.1/A8.2: the parent was interrupted (``user_cancel``): every child started before then is
        stopped and the parent's Agent call gets REJECT_MESSAGE."""
        children = await self.store.children(parent_session_id)
        statuses = await self.store.statuses(children)
        cancelled = 0
        for child, status in statuses.items():
            if status != "running":
                continue
            found = await self.record(child)
            if found is None or found[0].dispatched_ms > interrupted_at_ms or found[0].background:
                continue  # A8.3: a background child survives its parent's interrupt
            record = found[0]
            await self.stop_child(record)
            await self.answer_parent(record, interrupted_result(), "interrupted")
            cancelled += 1
        return cancelled

    async def sweep(self, shard: int, *, full: bool = True) -> int:
        """The shard owner's periodic pass over its running children: cancellations a crash kept from
        being cascaded, and the wall time; with ``full`` also completions a crash kept from being answered
        (each child's log is read). Returns how many children it ended."""
        ended = 0
        now = self.now_ms()
        for child, deadline in await self.store.running(shard):
            found = await self.record(child)
            if found is None:
                continue
            record, status = found
            if status != "running":
                await self.store.unindex(record)  # its index entry outlived a crash
                continue
            cancelled_at = await self.store.cancelled_at(record.parent_session_id)
            if not record.background and cancelled_at is not None and cancelled_at >= record.dispatched_ms:
                await self.stop_child(record)
                await self.answer_parent(record, interrupted_result(), "interrupted")
                ended += 1
                continue
            if (full or deadline <= now) and await self.check(child, now_ms=now) != "running":
                ended += 1
        return ended


def _is_prompt(message: Message) -> bool:
    """A plain user prompt (not a tool result, not meta): the start of a child's round."""
    return isinstance(message, UserMessage) and not message.is_meta and not tool_result_ids_of(message)


def child_entries_by_session(entries: Sequence[LogEntry]) -> dict[str, list[LogEntry]]:
    """The batch's log entries of child sessions, by session."""
    by_child: dict[str, list[LogEntry]] = {}
    for entry in entries:
        if parse_child_session(entry.session_id) is not None:
            by_child.setdefault(entry.session_id, []).append(entry)
    return by_child
