"""Ingestion's memory of the sessions of its shards, and how a ledger is stored in Redis.

Storage (per session): the :class:`~agentbus_redis.bus.ledger.LedgerState` JSON *without* the raw events of its open
streaming replies and without its closed tool call ids; one Redis list per open reply holding those events
(``RPUSH`` of the new ones each batch, ``DEL`` once the reply is over); the closed ids are the session's
``answered`` set (``SADD`` of the new ones each batch, read by the tool workers too). A state dump — written
every batch — therefore stays small however long a reply streams and however many calls a session made
(2 000 closed ids were 74 KB and ~60 µs per dump); the lists and the set are read back only when a ledger
is rebuilt from Redis (after a restart or a shard takeover).

Cache: the owner of a shard is the only writer of its sessions' ledgers (leases), so the ledger it wrote
last is the one Redis holds. :class:`LedgerCache` keeps it in memory. A batch *takes* its sessions out of
the cache and puts them back only once its write script succeeded (``BatchOutcome.on_settled``): after any
failure the next batch reloads them from Redis, which still holds the pre-batch state (the script
wrote nothing) or whatever a partial write left. The whole shard is forgotten on a lease change.

Applied idempotency keys: Redis holds each session's set (written every batch). The cache also keeps a
complete copy for sessions with at most :data:`MAX_SEEN_KEYS_PER_SESSION` keys (read once, when the ledger
is loaded), so a batch of cached sessions needs no read round trip at all; the others are asked each batch.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

import orjson

from agentbus_redis.bus.ledger import LedgerState, SessionLedger
from agentbus_redis.streaming.replies import OpenReply

DEFAULT_MAX_SESSIONS = 20_000
"""Ledgers kept in memory per worker; the least recently used beyond that are reloaded when needed."""

MAX_SEEN_KEYS_PER_SESSION = 5_000
"""Sessions with more applied keys are checked against Redis each batch instead of kept in memory."""

MAX_SEEN_KEYS = 1_000_000
"""Applied keys kept in memory per worker (≈ 100 MB); least recently used sessions go beyond that."""

SESSIONS_TOUCH_INTERVAL_MS = 60_000
"""How stale a session's score in the ``sessions`` set (last activity) may get before it is rewritten."""

_STORED_ELSEWHERE: Any = {"open_replies": {"__all__": {"events"}}, "closed_tool_use_ids": True}


@dataclass(slots=True)
class CachedLedger:
    """A session's ledger and what this worker knows Redis holds besides its state JSON."""

    ledger: SessionLedger
    stored_replies: dict[str, tuple[OpenReply, int]] = field(default_factory=dict)
    """request id → (the open reply, how many of its events its Redis list holds), as last written."""
    deadline_ms: int | None = None
    deadline_known: bool = False
    """Whether ``deadline_ms`` is the session's score in the shard's deadline set (None: absent)."""
    stuck_at_ms: int | None = None
    stuck_known: bool = False
    """Whether ``stuck_at_ms`` is the session's score in the shard's stuck-turn index (None: absent)."""
    listed_state: str | None = None
    """The console state index (views/states.py) this worker last put the session in (None: not known)."""
    touched_ms: int | None = None
    """When this worker last wrote the session's score in the ``sessions`` set."""
    seen: set[str] | None = None
    """Every idempotency key applied to the session (exactly Redis's set), or None: ask Redis."""

    @property
    def seen_count(self) -> int:
        return len(self.seen) if self.seen is not None else 0


def dump_state(state: LedgerState) -> str:
    """The state JSON as stored: open replies without their raw events (those live in lists), no closed
    call ids (those live in the ``answered`` set)."""
    return state.model_dump_json(exclude=_STORED_ELSEWHERE, exclude_unset=True)


def load_state(raw: bytes) -> LedgerState:
    return LedgerState.model_validate_json(raw, by_alias=True, by_name=False)


def restore_closed_calls(state: LedgerState, members: Iterable[bytes]) -> None:
    """Put the session's ``answered`` set back into the state (a state stored before the set took over
    may still list some itself: the union is the same set)."""
    state.closed_tool_use_ids.update(member.decode() for member in members)


def replies_to_restore(state: LedgerState) -> list[str]:
    """Open replies whose raw events must be read back from their lists (state stored without them)."""
    return [request_id for request_id, reply in state.open_replies.items() if not reply.events]


def restore_reply_events(cached: CachedLedger, request_id: str, raw_events: Iterable[bytes]) -> None:
    """Put the events read from a reply's list back into the reply, oldest first."""
    reply = cached.ledger.state.open_replies[request_id]
    reply.events = [orjson.loads(raw) for raw in raw_events]
    cached.stored_replies[request_id] = (reply, len(reply.events))


def encode_event(event: object) -> str:
    """A raw event as its reply's list holds it: the text of ``orjson.dumps`` (the same member: the write script's
    arguments are packed with ``use_bin_type=False``, bytes and text alike). Not the bytes ``orjson.dumps``
    returns: each keeps the 4 KiB buffer orjson wrote into (``tracemalloc``: 4,097 bytes for a 91-byte event), and
    they stay alive until the batch is sent (~50 events, ~200 KB a batch of the turns mix, for ~6 KB of text)."""
    return orjson.dumps(event).decode()


class LedgerCache:
    """The ledgers of the sessions of the shards this worker owns (see the module docstring)."""

    def __init__(self, max_sessions: int = DEFAULT_MAX_SESSIONS, max_seen_keys: int = MAX_SEEN_KEYS) -> None:
        self.max_sessions = max_sessions
        self.max_seen_keys = max_seen_keys
        self._shards: dict[int, dict[str, CachedLedger]] = {}
        self._size = 0
        self._seen_keys = 0

    def __len__(self) -> int:
        return self._size

    def take(self, shard: int, session: str) -> CachedLedger | None:
        """Remove and return the session's ledger (None when it must be loaded from Redis)."""
        cached = self._shards.get(shard, {}).pop(session, None)
        if cached is not None:
            self._size -= 1
            self._seen_keys -= cached.seen_count
        return cached

    def put_back(self, shard: int, ledgers: dict[str, CachedLedger]) -> None:
        """Keep the ledgers of a batch whose writes succeeded (most recently used last)."""
        sessions = self._shards.setdefault(shard, {})
        for session, cached in ledgers.items():
            if (previous := sessions.pop(session, None)) is not None:
                self._size -= 1
                self._seen_keys -= previous.seen_count
            if cached.seen_count > MAX_SEEN_KEYS_PER_SESSION:
                cached.seen = None
            sessions[session] = cached
            self._size += 1
            self._seen_keys += cached.seen_count
        self._evict()

    def forget_shard(self, shard: int) -> None:
        """The shard's lease changed hands (or may have): another owner may have written its ledgers."""
        dropped = self._shards.pop(shard, {})
        self._size -= len(dropped)
        self._seen_keys -= sum(cached.seen_count for cached in dropped.values())

    def _evict(self) -> None:
        while self._size > self.max_sessions or self._seen_keys > self.max_seen_keys:
            largest = max(self._shards.values(), key=len)
            oldest = next(iter(largest))
            self._seen_keys -= largest.pop(oldest).seen_count
            self._size -= 1
