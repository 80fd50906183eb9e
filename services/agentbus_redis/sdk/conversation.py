"""Send a prompt and watch the model's turn: ``async for event in converse(bus, session, prompt)``.

The events and the rules of when a turn ends are in :mod:`agentbus_redis.bus.conversation`; this module reads Redis.

What it reads, and why: the session's own log stream (``Topology.session_events``: every message, in
order, canonical) and the session's live reply stream (``Topology.live_reply``: the text deltas ingestion
applied, bus/live_reply.py) — both per session, so a watcher costs the same however many sessions
share its shard. (Reading the shard's ingress stream instead would make every watcher read every event of
every session of its shard, unchecked by ingestion: N watchers on a busy shard cost N × the shard's
traffic.) Both keys carry the shard's hash tag, so one ``XREAD`` takes both (one slot, also on a Cluster)
and sees the same moment of both: ingestion writes a batch's log entries and live deltas in one script.
The deltas are merged into the log by their ``after_seq``.

No race with a fast pipeline: the positions of both streams are read *before* the prompt is sent (as
``AgentbusClient.send_prompt_and_wait`` does), and everything logged before the prompt's own log entry
is ignored.

Rides out a Redis restart or a cluster failover: the prompt is published with one idempotency key and a
message uuid minted here (so the turn's start is recognised by the uuid even when the publish that landed
was not the one whose entry id came back), and every read is retried from the cursors kept here (a read
that failed moved no cursor), so no event is repeated or skipped; a Redis unavailable for longer than the
client's ``ride_out_s`` raises :class:`~agentbus_redis.runtime.ride_out.RedisUnavailable`.

Never hangs: ``timeout_s`` bounds the wait for the next sign of progress (a delta or a log entry). While
tool calls run, the wait also lasts until the session's tool deadline (after which ingestion answers an
overdue call with the placeholder), so a long quiet command is not mistaken for a dead bus.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import AsyncGenerator
from typing import TYPE_CHECKING, Any, Literal

from agentbus_redis.bus.conversation import (
    ApiError,
    ApiRetry,
    AssistantMessageComplete,
    ConversationEvent,
    Interrupted,
    Notice,
    Retracted,
    TaskNotification,
    TaskProgress,
    TaskStarted,
    TextDelta,
    ThinkingDelta,
    ToolCall,
    ToolProgress,
    ToolResult,
    TurnEnd,
    TurnTracker,
)
from agentbus_redis.bus.events import LogEntry, parse_log_entry
from agentbus_redis.bus.live_reply import LiveDelta, parse_live_delta
from agentbus_redis.messages.content import ContentBlock
from agentbus_redis.runtime.codec import DATA_FIELD
from agentbus_redis.streams.topology import INGESTION_GROUP

if TYPE_CHECKING:
    from agentbus_redis.sdk.client import AgentbusClient

DEFAULT_TIMEOUT_S = 300.0
"""The longest wait for any progress of the turn (the model's first token, a tool's result)."""
READ_COUNT = 500
POLL_MS = 1000
"""Longest single blocking read: the deadline is checked at least this often."""
INTERRUPT_POLL_MS = 50
"""After :meth:`Conversation.interrupt`, how often ingestion's progress is checked until it applied it."""

__all__ = [
    "ApiError",
    "ApiRetry",
    "AssistantMessageComplete",
    "Conversation",
    "ConversationEvent",
    "ConversationTimeout",
    "Interrupted",
    "Notice",
    "Retracted",
    "TaskNotification",
    "TaskProgress",
    "TaskStarted",
    "TextDelta",
    "ThinkingDelta",
    "ToolCall",
    "ToolProgress",
    "ToolResult",
    "TurnEnd",
    "converse",
]


class ConversationTimeout(TimeoutError):
    """The turn made no progress for ``timeout_s`` seconds; says what it was waiting for."""

    def __init__(self, session_id: str, timeout_s: float, waiting_for: str) -> None:
        super().__init__(f"session {session_id}: no progress for {timeout_s:g}s while waiting for {waiting_for}")
        self.session_id = session_id
        self.timeout_s = timeout_s
        self.waiting_for = waiting_for


class Conversation:
    """One turn of a session: iterate it for its events (see :func:`converse`); :meth:`interrupt` stops it.

    An interrupt that reaches the session while the model has not started its reply, or between replies, ends
    the turn with R10.1's ``[Request interrupted by user]`` (the request is pending, bus/turn_state.py) —
    or, with reason ``interrupt`` (a new message follows), without a log entry: after :meth:`interrupt` the
    iterator also watches for ingestion having applied it (the ingestion group's progress on the session's
    ingress shard), reads what it wrote, and ends with ``TurnEnd(stop_reason="interrupted")``.
    While tools run (R10.2) it still waits for their results and the interrupt text.
    """

    def __init__(
        self,
        bus: AgentbusClient,
        session_id: str,
        prompt: str | list[ContentBlock],
        *,
        timeout_s: float = DEFAULT_TIMEOUT_S,
        **prompt_options: Any,
    ) -> None:
        self.bus = bus
        self.session_id = session_id
        self.timeout_s = timeout_s
        self._interrupt_id: str | None = None
        self._sending: asyncio.Future[str] | None = None
        self._events = self._run(prompt, prompt_options)

    def __aiter__(self) -> Conversation:
        return self

    async def __anext__(self) -> ConversationEvent:
        return await self._events.__anext__()

    async def aclose(self) -> None:
        await self._events.aclose()

    async def interrupt(self, *, reason: Literal["user_cancel", "interrupt"] = "user_cancel") -> str:
        """Interrupt the session (R10.1 while the reply streams, R10.2 while tools run); keep iterating to see
        the turn close. Returns the interrupt's ingress entry id."""
        if self._sending is not None:
            await asyncio.shield(self._sending)  # never ahead of the prompt it interrupts (same ingress stream)
        self._interrupt_id = await self.bus.interrupt(self.session_id, reason=reason)
        return self._interrupt_id

    async def _run(
        self, prompt: str | list[ContentBlock], options: dict[str, Any]
    ) -> AsyncGenerator[ConversationEvent]:
        bus, session_id, timeout_s = self.bus, self.session_id, self.timeout_s
        log_key = bus.topology.session_events(session_id)
        live_key = bus.topology.live_reply(session_id)
        cursors: dict[Any, Any] = {log_key: await _last_id(bus, log_key), live_key: await _last_id(bus, live_key)}
        options = {**options, "uuid": options.get("uuid") or str(uuid.uuid4())}
        self._sending = asyncio.ensure_future(bus.send_prompt(session_id, prompt, **options))
        tracker = TurnTracker(await self._sending, prompt_uuid=options["uuid"])
        deadline = time.monotonic() + timeout_s
        interrupt_applied = False
        while tracker.end is None:
            remaining_ms = int((deadline - time.monotonic()) * 1000)
            if remaining_ms <= 0:
                remaining_ms = await _tool_deadline_ms(bus, session_id, tracker)
                if remaining_ms <= 0:
                    raise ConversationTimeout(session_id, timeout_s, tracker.waiting_for)
            watching = self._interrupt_id is not None and not interrupt_applied
            block_ms = min(remaining_ms, INTERRUPT_POLL_MS if watching else POLL_MS)
            rows: Any = await _read(bus, cursors, block_ms)
            if rows:
                deadline = time.monotonic() + timeout_s
                for event in _feed(tracker, _merged(_entries(rows, cursors, log_key, live_key))):
                    yield event
            if watching and self._interrupt_id is not None and tracker.end is None:
                interrupt_applied = await _applied(bus, session_id, self._interrupt_id)
            if interrupt_applied and tracker.end is None:
                # What ingestion wrote with the interrupt (R10.1's texts) is read first.
                rows = await _read(bus, cursors)
                for event in _feed(tracker, _merged(_entries(rows or [], cursors, log_key, live_key))):
                    yield event
                if tracker.end is None and not tracker.pending:
                    tracker.close_interrupted()
        # What was written together with the end (R9.5: a cut-off reply's API error comes with it) is read.
        rows = await _read(bus, cursors)
        if rows:
            for event in _feed(tracker, _merged(_entries(rows, cursors, log_key, live_key))):
                yield event
        assert tracker.end is not None
        yield tracker.end


def converse(
    bus: AgentbusClient,
    session_id: str,
    prompt: str | list[ContentBlock],
    *,
    timeout_s: float = DEFAULT_TIMEOUT_S,
    **prompt_options: Any,
) -> Conversation:
    """Send ``prompt`` to ``session_id`` and yield the turn's events until it ends; the last is
    :class:`TurnEnd`. Raises :class:`ConversationTimeout` (a ``TimeoutError``) when nothing happens for
    ``timeout_s`` seconds (see the module docstring). ``prompt_options`` go to ``send_prompt``. The prompt is
    sent when the iteration starts."""
    return Conversation(bus, session_id, prompt, timeout_s=timeout_s, **prompt_options)


async def _read(bus: AgentbusClient, cursors: dict[Any, Any], block_ms: int | None = None) -> Any:
    """One ``XREAD`` of both streams from ``cursors`` (moved only by what a read returned: a retry repeats
    nothing)."""
    return await bus.ride(lambda: bus.redis.xread(cursors, block=block_ms, count=READ_COUNT), f"read {list(cursors)}")


async def _applied(bus: AgentbusClient, session_id: str, entry_id: str) -> bool:
    return await bus.ride(lambda: _applied_now(bus, session_id, entry_id), f"check the interrupt {entry_id}")


async def _applied_now(bus: AgentbusClient, session_id: str, entry_id: str) -> bool:
    """Whether ingestion has applied (or dead-lettered) ingress entry ``entry_id`` of the session: its group
    has delivered that far and the entry is not pending."""
    stream = bus.topology.ingress_for(session_id)
    groups: Any = await bus.redis.xinfo_groups(stream)
    delivered = next((g["last-delivered-id"] for g in groups if _text(g["name"]) == INGESTION_GROUP), None)
    if delivered is None or _id_key(_text(delivered)) < _id_key(entry_id):
        return False
    pending: Any = await bus.redis.xpending_range(stream, INGESTION_GROUP, min=entry_id, max=entry_id, count=1)
    return not pending


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value


def _id_key(entry_id: str) -> tuple[int, int]:
    ms, _, seq = entry_id.partition("-")
    return int(ms), int(seq or 0)


async def _last_id(bus: AgentbusClient, stream: str) -> bytes | str:
    last: Any = await bus.ride(lambda: bus.redis.xrevrange(stream, count=1), f"read {stream}")
    return last[0][0] if last else "0-0"


async def _tool_deadline_ms(bus: AgentbusClient, session_id: str, tracker: TurnTracker) -> int:
    """While calls run: milliseconds until the session's tool deadline (ingestion's placeholder rule), plus a
    poll's grace; else 0."""
    if not tracker.pending:
        return 0
    shard = bus.topology.names.shard_of(session_id)
    deadlines = bus.topology.deadlines(shard)
    deadline_ms = await bus.ride(lambda: bus.redis.zscore(deadlines, session_id), f"read {deadlines}")
    if deadline_ms is None:
        return 0
    return int(deadline_ms - time.time() * 1000) + POLL_MS


def _entries(rows: Any, cursors: dict[Any, Any], log_key: str, live_key: str) -> tuple[list[LogEntry], list[LiveDelta]]:
    logged: list[LogEntry] = []
    live: list[LiveDelta] = []
    for stream, entries in rows:
        name = stream.decode() if isinstance(stream, bytes) else str(stream)
        for entry_id, fields in entries:
            cursors[name] = entry_id
            data = fields[DATA_FIELD.encode()]
            if name == log_key:
                logged.append(parse_log_entry(data))
            elif name == live_key:
                live.append(parse_live_delta(data))
    return logged, live


def _merged(read: tuple[list[LogEntry], list[LiveDelta]]) -> list[LogEntry | LiveDelta]:
    """One order: a delta applied at log position ``after_seq`` comes after log entry ``after_seq`` and
    before the next (bus/live_reply.py); each stream keeps its own order."""
    logged, live = read
    keyed: list[tuple[tuple[int, int, int], LogEntry | LiveDelta]] = [
        ((entry.seq, 0, n), entry) for n, entry in enumerate(logged)
    ]
    keyed += [((delta.after_seq, 1, n), delta) for n, delta in enumerate(live)]
    keyed.sort(key=lambda pair: pair[0])
    return [item for _, item in keyed]


def merged_entries(rows: Any, cursors: dict[Any, Any], log_key: str, live_key: str) -> list[LogEntry | LiveDelta]:
    """One ``XREAD`` of a session's log and live streams (moving ``cursors``), in one order: what a watcher that
    is not a turn tracker reads (the console's session page)."""
    return _merged(_entries(rows, cursors, log_key, live_key))


def _feed(tracker: TurnTracker, items: list[LogEntry | LiveDelta]) -> list[ConversationEvent]:
    events: list[ConversationEvent] = []
    for item in items:
        events += tracker.on_live(item) if isinstance(item, LiveDelta) else tracker.on_log(item)
    return events
