"""Publishes the counters every ``BatchConsumer`` already keeps (``ConsumerStats``) at scrape time.

The hot path does nothing extra: the consume loop increments plain ``int`` attributes, and this
collector reads them when Prometheus scrapes. Consumers are found through *providers* (callables
returning the consumers running now), because lane consumers come and go with shard leases: a consumer
that disappears from its provider is *retired* — its final counts are folded into a per-label total —
so the published counters never go backwards.

Labels: ``worker``, ``stream`` (family, see :func:`~agentbus_redis.observability.labels.stream_family`),
``group``. Lease state (shards owned, acquisition conflicts) of registered ``ShardLeases`` is published
too.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from typing import Final

from prometheus_client.metrics_core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from agentbus_redis.observability.labels import WorkerType, stream_family
from agentbus_redis.runtime.consumer import BatchConsumer, ConsumerStats
from agentbus_redis.runtime.leases import ShardLeases

ConsumerProvider = Callable[[], Iterable[BatchConsumer]]

COUNTER_FIELDS: Final[tuple[tuple[str, str, str], ...]] = (
    ("consumed", "agentbus_consumer_entries_consumed", "Entries handed to the handler (redeliveries included)."),
    ("produced", "agentbus_consumer_entries_produced", "Entries XADDed by the consumer's batch pipelines."),
    ("acked", "agentbus_consumer_entries_acked", "Entries acknowledged (XACK replies)."),
    ("dead_lettered", "agentbus_consumer_entries_dead_lettered", "Entries moved to the dead-letter stream."),
    ("reclaimed", "agentbus_messages_reclaimed", "Entries taken over from other consumers with XAUTOCLAIM."),
    ("redelivered", "agentbus_consumer_redeliveries", "Entries handled with a delivery count above 1."),
    ("batches", "agentbus_consumer_batches", "Batches settled (one script call each)."),
    ("handler_errors", "agentbus_consumer_handler_errors", "Handler calls that raised."),
    (
        "write_errors",
        "agentbus_consumer_write_errors",
        "Batches whose write Redis rejected (their entries were dead-lettered).",
    ),
    ("connection_errors", "agentbus_consumer_connection_errors", "Redis connection failures of the loop."),
)
"""(``ConsumerStats`` attribute, metric name without ``_total``, help)."""

_LABELS: Final = ["worker", "stream", "group"]
LabelKey = tuple[str, str, str]


@dataclass(slots=True)
class _Tracked:
    key: LabelKey
    stats: ConsumerStats
    """Kept so a retired consumer's final counts can still be read."""


class ConsumerStatsCollector(Collector):
    """A Prometheus collector over the consumers of registered providers (one per process)."""

    def __init__(self) -> None:
        self._providers: list[tuple[WorkerType, ConsumerProvider]] = []
        self._leases: list[tuple[WorkerType, ShardLeases]] = []
        self._tracked: dict[int, _Tracked] = {}
        self._retired: dict[LabelKey, list[int]] = {}
        self._lock = threading.Lock()

    def track(self, worker: WorkerType, provider: ConsumerProvider) -> None:
        """Publish the consumers ``provider()`` returns (e.g. ``lambda: lanes.consumers.values()``)."""
        with self._lock:
            self._providers.append((worker, provider))

    def track_leases(self, worker: WorkerType, leases: ShardLeases) -> None:
        with self._lock:
            self._leases.append((worker, leases))

    def clear(self) -> None:
        """Forget every provider (retired totals are kept: counters never go backwards)."""
        with self._lock:
            self._refresh(current={})
            self._providers.clear()
            self._leases.clear()

    def describe(self) -> Iterator[Metric]:
        # Describing without collecting keeps registration free of provider calls.
        return iter(_Families().all())

    def collect(self) -> Iterator[Metric]:
        with self._lock:
            current: dict[int, tuple[LabelKey, BatchConsumer]] = {}
            for worker, provider in self._providers:
                for consumer in list(provider()):
                    key = (worker, stream_family(consumer.stream), consumer.group)
                    current[id(consumer.stats)] = (key, consumer)
            self._refresh(current)
            return iter(self._snapshot(current))

    def _refresh(self, current: dict[int, tuple[LabelKey, BatchConsumer]]) -> None:
        """Retire consumers that left their provider; start tracking new ones."""
        for stats_id in [stats_id for stats_id in self._tracked if stats_id not in current]:
            gone = self._tracked.pop(stats_id)
            totals = self._retired.setdefault(gone.key, [0] * len(COUNTER_FIELDS))
            for index, (field, _, _) in enumerate(COUNTER_FIELDS):
                totals[index] += int(getattr(gone.stats, field))
        for stats_id, (key, consumer) in current.items():
            if stats_id not in self._tracked:
                self._tracked[stats_id] = _Tracked(key, consumer.stats)

    def _snapshot(self, current: dict[int, tuple[LabelKey, BatchConsumer]]) -> list[Metric]:
        families = _Families()
        totals: dict[LabelKey, list[int]] = {key: list(values) for key, values in self._retired.items()}
        running: dict[LabelKey, int] = {}
        connected: dict[LabelKey, int] = {}
        oldest: dict[LabelKey, float] = {}
        now = time.monotonic()
        for key, consumer in current.values():
            stats = consumer.stats
            row = totals.setdefault(key, [0] * len(COUNTER_FIELDS))
            for index, (field, _, _) in enumerate(COUNTER_FIELDS):
                row[index] += int(getattr(stats, field))
            running[key] = running.get(key, 0) + 1
            connected[key] = connected.get(key, 0) + int(stats.connected)
            oldest[key] = max(oldest.get(key, 0.0), now - stats.last_progress_monotonic)
        for key, row in totals.items():
            labels = list(key)
            for family, value in zip(families.counters, row, strict=True):
                family.add_metric(labels, value)
            families.running.add_metric(labels, running.get(key, 0))
            families.connected.add_metric(labels, connected.get(key, 0))
            if key in oldest:
                families.progress_age.add_metric(labels, oldest[key])
        for worker, leases in self._leases:
            families.shards_owned.add_metric([worker, leases.lane], len(leases.owned))
            families.lease_conflicts.add_metric([worker, leases.lane], leases.conflicts)
        return families.all()


class _Families:
    """Fresh metric families for one scrape."""

    def __init__(self) -> None:
        self.counters = [CounterMetricFamily(name, text, labels=_LABELS) for _, name, text in COUNTER_FIELDS]
        self.running = GaugeMetricFamily(
            "agentbus_consumers", "Consume loops running now (one per owned shard on ordered lanes).", labels=_LABELS
        )
        self.connected = GaugeMetricFamily(
            "agentbus_consumers_connected", "Consume loops whose last Redis call succeeded.", labels=_LABELS
        )
        self.progress_age = GaugeMetricFamily(
            "agentbus_consumer_progress_age_seconds",
            "Seconds since the least recently progressing consume loop completed a step.",
            labels=_LABELS,
        )
        self.shards_owned = GaugeMetricFamily(
            "agentbus_lane_shards_owned", "Shards whose lease this process holds.", labels=["worker", "lane"]
        )
        self.lease_conflicts = CounterMetricFamily(
            "agentbus_lane_lease_conflicts",
            "Lease acquisitions that found the shard held by another worker.",
            labels=["worker", "lane"],
        )

    def all(self) -> list[Metric]:
        return [
            *self.counters,
            self.running,
            self.connected,
            self.progress_age,
            self.shards_owned,
            self.lease_conflicts,
        ]


def describe_metrics() -> list[Metric]:
    """The (empty) metric families this collector publishes, for catalogs and tests."""
    return _Families().all()


CONSUMER_STATS: Final = ConsumerStatsCollector()
"""The process-wide collector; :func:`register_consumer_collector` puts it in the default registry once."""

_registered = False
_register_lock = threading.Lock()


def register_consumer_collector() -> ConsumerStatsCollector:
    """Register :data:`CONSUMER_STATS` with the default registry (idempotent) and return it."""
    global _registered
    from prometheus_client import REGISTRY

    with _register_lock:
        if not _registered:
            REGISTRY.register(CONSUMER_STATS)
            _registered = True
    return CONSUMER_STATS
