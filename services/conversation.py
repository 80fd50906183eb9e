"""Send a prompt and watch the model's turn: ``async for event in converse(bus, session, prompt)``.

The events and the rules of when a turn ends are in :mod:`shared.conversation`; this module reads Redis.

What it reads, and why: the session's own log stream (``Topology.session_events``: every message, in
order, canonical) and the session's live reply stream (``Topology.live_reply``: the text deltas ingestion
applied, shared/live_reply.py) — both per session, so a watcher costs the same however many sessions
share its shard. (Reading the shard's ingress stream instead would make every watcher read every event of
every session of its shard, unchecked by ingestion: N watchers on a busy shard cost N × the shard's
traffic.) Both keys carry the shard's hash tag, so one ``XREAD`` takes both (one slot, also on a Cluster)
and sees the same moment of both: ingestion writes a batch's log entries and live deltas in one script.
The deltas are merged into the log by their ``after_seq``.

No race with a fast pipeline: the positions of both streams are read *before* the prompt is sent (as
``AgentbusClient.send_prompt_and_wait`` does), and everything logged before the prompt's own log entry
is ignored.

Never hangs: ``timeout_s`` bounds the wait for the next sign of progress (a delta or a log entry). While
tool calls run, the wait also lasts until the session's tool deadline (after which ingestion answers an
overdue call with the placeholder), so a long quiet command is not mistaken for a dead bus.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from typing import TYPE_CHECKING, Any

from services.runtime.codec import DATA_FIELD
from shared.content import ContentBlock
from shared.conversation import (
    ApiError,
    ApiRetry,
    AssistantMessageComplete,
    ConversationEvent,
    Interrupted,
    Notice,
    Retracted,
    TextDelta,
    ThinkingDelta,
    ToolCall,
    ToolProgress,
    ToolResult,
    TurnEnd,
    TurnTracker,
)
from shared.events import LogEntry, parse_log_entry
from shared.live_reply import LiveDelta, parse_live_delta

if TYPE_CHECKING:
    from services.client import AgentbusClient

DEFAULT_TIMEOUT_S = 300.0
"""The longest wait for any progress of the turn (the model's first token, a tool's result)."""
READ_COUNT = 500
POLL_MS = 1000
"""Longest single blocking read: the deadline is checked at least this often."""

__all__ = [
    "ApiError",
    "ApiRetry",
    "AssistantMessageComplete",
    "ConversationEvent",
    "ConversationTimeout",
    "Interrupted",
    "Notice",
    "Retracted",
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


async def converse(
    bus: AgentbusClient,
    session_id: str,
    prompt: str | list[ContentBlock],
    *,
    timeout_s: float = DEFAULT_TIMEOUT_S,
    **prompt_options: Any,
) -> AsyncIterator[ConversationEvent]:
    """Send ``prompt`` to ``session_id`` and yield the turn's events until it ends; the last is
    :class:`TurnEnd`. Raises :class:`ConversationTimeout` (a ``TimeoutError``) when nothing happens for
    ``timeout_s`` seconds (see the module docstring). ``prompt_options`` go to ``send_prompt``."""
    log_key = bus.topology.session_events(session_id)
    live_key = bus.topology.live_reply(session_id)
    cursors: dict[Any, Any] = {log_key: await _last_id(bus, log_key), live_key: await _last_id(bus, live_key)}
    tracker = TurnTracker(await bus.send_prompt(session_id, prompt, **prompt_options))
    deadline = time.monotonic() + timeout_s
    while tracker.end is None:
        remaining_ms = int((deadline - time.monotonic()) * 1000)
        if remaining_ms <= 0:
            remaining_ms = await _tool_deadline_ms(bus, session_id, tracker)
            if remaining_ms <= 0:
                raise ConversationTimeout(session_id, timeout_s, tracker.waiting_for)
        rows: Any = await bus.redis.xread(cursors, block=min(remaining_ms, POLL_MS), count=READ_COUNT)
        if not rows:
            continue
        deadline = time.monotonic() + timeout_s
        for event in _feed(tracker, _merged(_entries(rows, cursors, log_key, live_key))):
            yield event
    # What was written together with the end (R9.5: a cut-off reply's API error comes with it) is read.
    rows = await bus.redis.xread(cursors, count=READ_COUNT)
    if rows:
        for event in _feed(tracker, _merged(_entries(rows, cursors, log_key, live_key))):
            yield event
    assert tracker.end is not None
    yield tracker.end


async def _last_id(bus: AgentbusClient, stream: str) -> bytes | str:
    last: Any = await bus.redis.xrevrange(stream, count=1)
    return last[0][0] if last else "0-0"


async def _tool_deadline_ms(bus: AgentbusClient, session_id: str, tracker: TurnTracker) -> int:
    """While calls run: milliseconds until the session's tool deadline (ingestion's placeholder rule), plus a
    poll's grace; else 0."""
    if not tracker.pending:
        return 0
    shard = bus.topology.names.shard_of(session_id)
    deadline_ms = await bus.redis.zscore(bus.topology.deadlines(shard), session_id)
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
    before the next (shared/live_reply.py); each stream keeps its own order."""
    logged, live = read
    keyed: list[tuple[tuple[int, int, int], LogEntry | LiveDelta]] = [
        ((entry.seq, 0, n), entry) for n, entry in enumerate(logged)
    ]
    keyed += [((delta.after_seq, 1, n), delta) for n, delta in enumerate(live)]
    keyed.sort(key=lambda pair: pair[0])
    return [item for _, item in keyed]


def _feed(tracker: TurnTracker, items: list[LogEntry | LiveDelta]) -> list[ConversationEvent]:
    events: list[ConversationEvent] = []
    for item in items:
        events += tracker.on_live(item) if isinstance(item, LiveDelta) else tracker.on_log(item)
    return events
