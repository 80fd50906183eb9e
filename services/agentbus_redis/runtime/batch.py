"""The vocabulary of the consume loop: what a batch handler returns, the loop's tuning and counters.

Kept apart from ``consumer.py`` (which re-exports all of it) so the loop itself stays readable.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field
from typing import NamedTuple

from agentbus_redis.runtime.key_calls import KeyCalls
from agentbus_redis.streams.entries import StreamEntry

FieldValue = bytes | str | int | float
CallWriter = Callable[[KeyCalls], None]


def raise_if_cancelling() -> None:
    """Re-raise a cancellation that an ``asyncio.wait_for`` swallowed.

    On Python 3.11, ``wait_for`` returns the inner result instead of raising when the task is cancelled
    just as the inner awaitable completes (gh-86296). A loop that only checks its stop flag would then
    run on forever and hang ``asyncio.run``'s shutdown; ``Task.cancelling()`` still records the request.
    """
    task = asyncio.current_task()
    if task is not None and task.cancelling():
        raise asyncio.CancelledError


class Output(NamedTuple):
    """One entry to XADD to ``stream`` in the batch's write."""

    stream: str
    fields: Mapping[str, FieldValue]
    maxlen: int | None = None
    """Approximate MAXLEN trim (``~``); None keeps everything."""


@dataclass(frozen=True, slots=True)
class Poison:
    """The handler's verdict that one entry can never succeed: dead-letter it now."""

    reason: str
    """A short bounded word (used as a metrics label), e.g. ``decode_error``, ``invariant_violation``."""
    detail: str = ""


@dataclass(slots=True)
class BatchOutcome:
    """What the handler wants written for a batch; the consumer writes it in one script call."""

    outputs: Sequence[Output] = ()
    write: CallWriter | None = None
    """Extra commands for the batch's write (after the outputs, before the XACK)."""
    ack: Collection[str] | None = None
    """Entry ids to ack; None acks every entry of the batch. Entries not acked stay pending."""
    poison: Mapping[str, Poison] = field(default_factory=dict)
    """Entry id → why it is dead-lettered (it is acked too)."""
    on_settled: Callable[[], None] | None = None
    """Called once everything above was written without any error (so a handler may commit what it
    cached about the batch); never called when the write failed or only partly succeeded."""


BatchHandler = Callable[[list[StreamEntry]], Awaitable[BatchOutcome]]


class OutputWriteError(RuntimeError):
    """Redis rejected the write of a batch and of its dead letters; the affected entries are named."""

    def __init__(self, stream: str, entry_ids: Sequence[str], errors: Sequence[BaseException]) -> None:
        super().__init__(f"{stream}: write for entries {list(entry_ids)} failed: {errors[0]!r}")
        self.stream = stream
        self.entry_ids = list(entry_ids)
        self.errors = list(errors)


@dataclass(frozen=True, slots=True)
class Fence:
    """A fencing token: the value ``key`` must still hold for this consumer's writes to apply."""

    key: str
    token: str


@dataclass(frozen=True, slots=True)
class ConsumerConfig:
    """Tuning of one consumer loop; the defaults suit the unordered pool."""

    count: int = 100
    block_ms: int = 1000
    claim_min_idle_ms: int = 30_000
    claim_interval_s: float = 15.0
    claim_max_pages: int = 10
    """XAUTOCLAIM pages (of ``count`` entries) per sweep, so a big backlog does not starve new reads."""
    max_deliveries: int = 5
    ordered: bool = False
    """Keep stream order: a failed entry blocks later ones (shard lanes, one reader per stream)."""
    claim_all_on_start: bool = False
    """Take over every pending entry of the group at start (a new lane owner after a failover)."""
    transactional: bool = False
    """The handler reads state that earlier batches wrote. Informational since issue 15: an ordered lane
    narrowing a failed batch settles each part that succeeds before handling the next, which such a handler
    needs (and the others do not mind)."""
    fence: Fence | None = None
    """Write a batch only while ``fence.key`` holds ``fence.token``: set by shard lanes to the lane's lease
    epoch."""
    dead_letter_stream: str | None = None
    """Defaults to ``<stream>:dlq``."""
    backoff_initial_s: float = 0.05
    backoff_max_s: float = 2.0


@dataclass(slots=True)
class ConsumerStats:
    """Counters and heartbeats a metrics or health layer reads; never reset."""

    consumed: int = 0
    produced: int = 0
    acked: int = 0
    dead_lettered: int = 0
    reclaimed: int = 0
    redelivered: int = 0
    batches: int = 0
    handler_errors: int = 0
    write_errors: int = 0
    fenced: int = 0
    """Batches refused because the fence moved on (another owner took the shard)."""
    connection_errors: int = 0
    last_progress_monotonic: float = field(default_factory=time.monotonic)
    """Last time the loop completed a step (a read, a batch, or a retry while Redis is down). A liveness
    threshold must exceed ``block_ms`` plus the longest a handler may legitimately take."""
    connected: bool = False
