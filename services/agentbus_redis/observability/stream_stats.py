"""Consumer-group lag, pending and stream length, polled off the hot path (one poller per process).

A scrape must not block on Redis, and a synchronous Prometheus collector cannot await the asyncio
client, so a background task polls every ``interval_s`` with one pipeline (``XINFO GROUPS``, ``XPENDING``
summary and ``XLEN`` per watched stream, ``XLEN`` of its dead-letter stream) and the collector publishes
the latest snapshot. Each worker watches the streams its own group reads (every shard of a lane), so all
replicas of a worker type report the same values: dashboards aggregate with
``max by (stream, group, shard)`` before summing over shards (ecosystem.md §1.8: "run global group
collectors once" — here, deduplicated in the query rather than elected among pods).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

import redis.asyncio as aioredis
import structlog
from prometheus_client.metrics_core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import REGISTRY, Collector

from agentbus_redis.observability.labels import stream_family
from agentbus_redis.runtime.periodic import PeriodicTask
from agentbus_redis.streams.entries import id_text
from agentbus_redis.streams.names import dead_letter_stream

log = structlog.get_logger(__name__)

_STREAM_LABELS: Final = ["stream", "shard"]
_GROUP_LABELS: Final = ["stream", "group", "shard"]


@dataclass(frozen=True, slots=True)
class WatchedStream:
    """A stream to report on, with the group whose lag and pending list matter (None: length only)."""

    stream: str
    group: str | None
    shard: int | None = None

    @property
    def shard_label(self) -> str:
        return "" if self.shard is None else str(self.shard)


@dataclass(frozen=True, slots=True)
class GroupState:
    length: int
    dead_letters: int
    group_present: bool
    lag: int | None
    """None when Redis cannot compute it (entries deleted in the group's range) or the group is missing."""
    pending: int
    oldest_pending_ms: int | None
    """Epoch ms of the oldest pending entry's id."""


@dataclass(slots=True)
class StreamStatsSnapshot:
    taken_ms: int
    states: dict[WatchedStream, GroupState] = field(default_factory=dict)


def _field(row: Mapping[Any, Any], name: str) -> Any:
    if name in row:
        return row[name]
    return row.get(name.encode())


def group_state(
    watched: WatchedStream, groups_reply: Any, pending_reply: Any, length: Any, dead_letters: Any
) -> GroupState:
    """Fold the pipeline replies for one watched stream (an exception reply means the key is missing)."""
    stream_length = int(length) if isinstance(length, int) else 0
    dlq_length = int(dead_letters) if isinstance(dead_letters, int) else 0
    if watched.group is None or isinstance(groups_reply, Exception):
        return GroupState(stream_length, dlq_length, False, None, 0, None)
    row = next((row for row in groups_reply if id_text(_field(row, "name")) == watched.group), None)
    if row is None:
        return GroupState(stream_length, dlq_length, False, None, 0, None)
    lag = _field(row, "lag")
    pending = int(_field(row, "pending") or 0)
    oldest: int | None = None
    if pending and isinstance(pending_reply, Mapping):
        smallest = _field(pending_reply, "min")
        if smallest is not None:
            oldest = int(id_text(smallest).partition("-")[0])
    return GroupState(stream_length, dlq_length, True, None if lag is None else int(lag), pending, oldest)


class StreamStatsPoller(PeriodicTask, Collector):
    """Polls the watched streams and publishes ``agentbus_stream_*`` gauges from the latest snapshot (Redis
    errors are counted and the last snapshot stays published)."""

    task_name = "stream-stats-poller"
    failure_event = "stream_stats_poll_failed"

    def __init__(self, redis: aioredis.Redis, watched: Sequence[WatchedStream], *, interval_s: float = 15.0) -> None:
        super().__init__(interval_s)
        self.redis = redis
        self.watched = list(watched)
        self.snapshot: StreamStatsSnapshot | None = None
        self._lock = threading.Lock()

    async def poll_once(self) -> StreamStatsSnapshot:
        """One pipeline for every watched stream; replaces the published snapshot."""
        pipe = self.redis.pipeline(transaction=False)
        for watched in self.watched:
            pipe.xinfo_groups(watched.stream)
            if watched.group is not None:
                pipe.xpending(watched.stream, watched.group)
            pipe.xlen(watched.stream)
            pipe.xlen(dead_letter_stream(watched.stream))
        replies: list[Any] = await pipe.execute(raise_on_error=False)
        snapshot = StreamStatsSnapshot(taken_ms=time.time_ns() // 1_000_000)
        position = 0
        for watched in self.watched:
            groups = replies[position]
            pending = replies[position + 1] if watched.group is not None else None
            position += 2 if watched.group is not None else 1
            snapshot.states[watched] = group_state(watched, groups, pending, replies[position], replies[position + 1])
            position += 2
        with self._lock:
            self.snapshot = snapshot
        return snapshot

    async def tick(self) -> None:
        await self.poll_once()

    def describe(self) -> Iterator[Metric]:
        return iter(_Families().all())

    def collect(self) -> Iterator[Metric]:
        with self._lock:
            snapshot = self.snapshot
        families = _Families()
        families.errors.add_metric([], self.errors)
        if snapshot is not None:
            families.age.add_metric([], max(time.time_ns() // 1_000_000 - snapshot.taken_ms, 0) / 1000)
            for watched, state in snapshot.states.items():
                family = stream_family(watched.stream)
                shard = watched.shard_label
                families.length.add_metric([family, shard], state.length)
                families.length.add_metric([f"{family}_dlq", shard], state.dead_letters)
                if watched.group is None:
                    continue
                labels = [family, watched.group, shard]
                families.present.add_metric(labels, int(state.group_present))
                if state.lag is not None:
                    families.lag.add_metric(labels, state.lag)
                if state.group_present:
                    families.pending.add_metric(labels, state.pending)
                    oldest_s = 0.0
                    if state.oldest_pending_ms is not None:
                        oldest_s = max(snapshot.taken_ms - state.oldest_pending_ms, 0) / 1000
                    families.oldest.add_metric(labels, oldest_s)
        return iter(families.all())


class _Families:
    def __init__(self) -> None:
        self.length = GaugeMetricFamily(
            "agentbus_stream_length", "XLEN of a watched stream (and of its dead-letter stream).", labels=_STREAM_LABELS
        )
        self.lag = GaugeMetricFamily(
            "agentbus_stream_lag", "Consumer-group lag (XINFO GROUPS): entries not yet delivered.", labels=_GROUP_LABELS
        )
        self.pending = GaugeMetricFamily(
            "agentbus_stream_pending", "Entries delivered but not acknowledged (the PEL).", labels=_GROUP_LABELS
        )
        self.oldest = GaugeMetricFamily(
            "agentbus_stream_oldest_pending_age_seconds",
            "Age of the oldest pending entry (from its id's timestamp); 0 when nothing is pending.",
            labels=_GROUP_LABELS,
        )
        self.present = GaugeMetricFamily(
            "agentbus_stream_group_present",
            "1 when the consumer group exists (run `agentbus streams init` before KEDA reads it).",
            labels=_GROUP_LABELS,
        )
        self.age = GaugeMetricFamily("agentbus_stream_stats_age_seconds", "Age of the published stream snapshot.")
        self.errors = CounterMetricFamily("agentbus_stream_stats_errors", "Failed stream-stats polls.")

    def all(self) -> list[Metric]:
        return [self.length, self.lag, self.pending, self.oldest, self.present, self.age, self.errors]


def describe_metrics() -> list[Metric]:
    """The (empty) metric families a poller publishes: names, types and help, for catalogs and tests."""
    return _Families().all()


_active: StreamStatsPoller | None = None
_active_lock = threading.Lock()


def register_stream_stats(poller: StreamStatsPoller) -> StreamStatsPoller:
    """Make ``poller`` the process's one stream-stats collector (replacing and unregistering a previous one)."""
    global _active
    with _active_lock:
        if _active is not None:
            REGISTRY.unregister(_active)
        REGISTRY.register(poller)
        _active = poller
    return poller


def unregister_stream_stats() -> None:
    global _active
    with _active_lock:
        if _active is not None:
            REGISTRY.unregister(_active)
            _active = None
