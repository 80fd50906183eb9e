"""The live text of a reply still streaming: what a watcher (``agentbus chat``) prints as the model writes.

The canonical log holds one assistant message per *finished* content block (R9.4), so a watcher of the log
sees a block's text only when the block ends. To show text as it arrives, ingestion also appends the text
and thinking deltas it applies to a small per-session stream (``Topology.live_reply``), in the same atomic
write as the log entries of the batch. Consecutive deltas of one block applied in one batch become one
:class:`LiveDelta` (a busy ingestion batches many events: fewer entries, same text).

``after_seq`` is the session's log position when the delta was applied: the delta comes after log entry
``after_seq`` and before ``after_seq + 1``. A block's deltas are always applied before the block's message
is logged (its ``content_block_stop`` comes after them, and R9.5 holds the last block back even longer),
so a watcher reading both streams can put them in one order.

Cost (``bench/live_reply.py``, a stream of text deltas only, the worst case): ingestion plus Redis CPU per
event ×1.06–1.10 with the live deltas on, against off, in the same run.

The live stream is a view for humans, not a record: trimmed (approximately) to
:data:`LIVE_REPLY_MAXLEN` entries and expired :data:`LIVE_REPLY_TTL_MS` after its last write. The log stays
the source of truth: a watcher that missed deltas takes the rest of a block's text from its logged message.
"""

from __future__ import annotations

from typing import Literal

from agentbus_redis.bus.events import SCHEMA_VERSION, BusModel
from agentbus_redis.json_types import JsonObject

LIVE_REPLY_MAXLEN = 2000
"""Approximate cap of a session's live stream (entries): far more than a watcher lags behind."""
LIVE_REPLY_TTL_MS = 3_600_000
"""A session's live stream expires this long after its last delta (a quiet session keeps nothing)."""

LiveKind = Literal["text", "thinking"]

_DELTA_FIELDS: dict[str, tuple[LiveKind, str]] = {
    "text_delta": ("text", "text"),
    "thinking_delta": ("thinking", "thinking"),
}
"""R9.3 delta type → (what it adds to, the field holding the added text)."""


class LiveDelta(BusModel):
    """Text added to block ``index`` of the reply to ``request_id`` (see the module docstring)."""

    type: Literal["live_delta"] = "live_delta"
    v: int = SCHEMA_VERSION
    request_id: str
    index: int
    kind: LiveKind
    text: str
    after_seq: int


def live_text_of(event: JsonObject) -> tuple[int, LiveKind, str] | None:
    """(block index, kind, added text) of one raw stream event, or None when it adds no text (starts, stops,
    tool input, signatures, message events). Plain dict reads: it runs for every event ingestion applies."""
    if event.get("type") != "content_block_delta":
        return None
    delta = event.get("delta")
    index = event.get("index")
    if not isinstance(delta, dict) or not isinstance(index, int) or isinstance(index, bool):
        return None
    target = _DELTA_FIELDS.get(str(delta.get("type")))
    if target is None:
        return None
    kind, field = target
    text = delta.get(field)
    if not isinstance(text, str) or not text:
        return None
    return index, kind, text


class LiveDeltas:
    """The live deltas of one batch of one session, consecutive ones of a block at one log position merged
    (the models are built once per entry, in :meth:`entries`)."""

    def __init__(self) -> None:
        self._runs: list[tuple[tuple[str, int, LiveKind, int], list[str]]] = []

    def add(self, request_id: str, event: JsonObject, *, after_seq: int) -> bool:
        """Add the text of ``event`` (if any); True when it starts a new entry."""
        found = live_text_of(event)
        if found is None:
            return False
        index, kind, text = found
        key = (request_id, index, kind, after_seq)
        if self._runs and self._runs[-1][0] == key:
            self._runs[-1][1].append(text)
            return False
        self._runs.append((key, [text]))
        return True

    def entries(self) -> list[LiveDelta]:
        return [
            LiveDelta.from_fields(
                {"request_id": rid, "index": index, "kind": kind, "text": "".join(parts), "after_seq": after_seq},
            )
            for (rid, index, kind, after_seq), parts in self._runs
        ]


def parse_live_delta(data: str | bytes) -> LiveDelta:
    """Validate a live stream entry body."""
    return LiveDelta.model_validate_json(data)
