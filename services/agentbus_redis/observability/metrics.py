"""Every ``agentbus_*`` metric of a worker, and the small recording functions workers call once per batch.

Conventions (ecosystem.md §1.8, §4.4): the ``agentbus_`` prefix, base units, ``_total`` counters, bounded
labels only (``worker``, ``stream`` = stream family, ``type``, ``group``, ``tool``, ``outcome``, ``kind``,
``rule``, ``reason``, ``stage``, ``decision``) and never a session id, uuid or tool_use id.

Cost (redis-streams-baseline.md §6): a labelled ``.labels(...)`` call costs ~1.8 µs, a pre-bound child
~0.5 µs. The recording functions below keep one pre-bound child per label tuple (:class:`BoundChildren`)
and are meant to be called once per batch with per-batch tallies, so the per-message cost is the
caller's ``dict`` increment. Counters a :class:`~agentbus_redis.runtime.consumer.BatchConsumer` already keeps
(consumed, acked, reclaimed, …) are not re-counted here: :mod:`.consumer_metrics` reads them at scrape
time. Stream lag and pending come from :mod:`.stream_stats`.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable, Iterable, Mapping
from typing import Final, Generic, Literal, TypeVar

from prometheus_client import Counter, Histogram, Info, disable_created_metrics
from prometheus_client.metrics_core import Metric

from agentbus_redis.config.build_info import build_commit, package_version
from agentbus_redis.observability import approval_metrics, consumer_metrics, model_metrics, stream_stats, switch
from agentbus_redis.observability.labels import (
    EVENT_TYPES,
    REPAIR_KINDS,
    LabelGuard,
    ToolOutcome,
    WorkerType,
    stream_family,
    tool_label,
)
from agentbus_redis.runtime.consumer import BatchOutcome
from agentbus_redis.streams.entries import StreamEntry

# ``*_created`` series double the series count for no use on these dashboards.
disable_created_metrics()  # type: ignore[no-untyped-call]

LATENCY_BUCKETS: Final = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)
"""Seconds, for batch handling and end-to-end latency (p99 target 10 ms, issue 4)."""
TOOL_BUCKETS: Final = (0.005, 0.025, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0, 600.0, 900.0)
"""Seconds, up to the default tool deadline."""
FSYNC_BUCKETS: Final = (0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 1.0)
BATCH_SIZE_BUCKETS: Final = (1.0, 2.0, 5.0, 10.0, 20.0, 50.0, 100.0, 200.0, 500.0, 1000.0)

EndToEndStage = Literal["log_written", "request_published", "transcript_durable"]
"""Where an end-to-end latency is measured (from the ingress entry id's timestamp)."""

M = TypeVar("M", Counter, Histogram)


class BoundChildren(Generic[M]):
    """Pre-bound children of one labelled metric, keyed by label values (callers bound the values)."""

    __slots__ = ("_children", "_metric")

    def __init__(self, metric: M) -> None:
        self._metric: M = metric
        self._children: dict[tuple[str, ...], M] = {}

    def __call__(self, *values: str) -> M:
        child = self._children.get(values)
        if child is None:
            child = self._children[values] = self._metric.labels(*values)
        return child


# --------------------------------------------------------------------------------------------- definitions
EVENTS_CONSUMED = Counter(
    "agentbus_events_consumed_total",
    "Stream entries handled by a worker, by stream family and event type.",
    ["worker", "stream", "type"],
)
EVENTS_PRODUCED = Counter(
    "agentbus_events_produced_total",
    "Stream entries written by a worker, by destination stream family and event type.",
    ["worker", "stream", "type"],
)
EVENTS_DEAD_LETTERED = Counter(
    "agentbus_events_dead_lettered_total",
    "Entries a worker's handler declared poison (decode error, invariant violation, …), by reason.",
    ["worker", "stream", "reason"],
)
SESSIONS_STUCK_ENDED = Counter(
    "agentbus_sessions_stuck_ended_total",
    "Session waits ended by ingestion's stuck-turn sweep (their owner was lost: bus/stuck_turns.py), by what "
    "the session waited for (model_reply, tool_result, child_agent, approval).",
    ["waiting_for"],
)
for _waiting_for in ("model_reply", "tool_result", "child_agent", "approval"):
    SESSIONS_STUCK_ENDED.labels(_waiting_for)  # shown as 0 before the first: an alert can watch its increase
BATCH_DURATION = Histogram(
    "agentbus_batch_duration_seconds",
    "Time a worker's batch handler took for one batch.",
    ["worker", "stream"],
    buckets=LATENCY_BUCKETS,
)
BATCH_SIZE = Histogram(
    "agentbus_batch_entries",
    "Entries per handled batch.",
    ["worker", "stream"],
    buckets=BATCH_SIZE_BUCKETS,
)
SANDBOX_NETWORK_REQUESTS = Counter(
    "agentbus_sandbox_network_requests_total",
    "Requests sandboxed commands made through the tool worker's allow-listing proxy, by decision (allowed, "
    "denied) and reason (allowed, not_allowed, denied, ip_literal, port, loopback, non_global_address, "
    "no_address, invalid_host, bad_request, too_many_connections).",
    ["decision", "reason"],
)
TOOL_EXECUTIONS = Counter(
    "agentbus_tool_executions_total",
    "tool_use calls answered, by tool, outcome (placeholder = answered without running) and the worker's pool.",
    ["tool", "outcome", "pool"],
)
TOOL_DURATION = Histogram(
    "agentbus_tool_execution_duration_seconds",
    "Run time of a tool call (not recorded for placeholders, which do not run), by tool, outcome and pool.",
    ["tool", "outcome", "pool"],
    buckets=TOOL_BUCKETS,
)
NORMALIZATION_REPAIRS = Counter(
    "agentbus_normalization_repairs_total",
    "Repairs the normalizer applied while building API requests, by kind.",
    ["kind"],
)
REQUESTS_PUBLISHED = Counter(
    "agentbus_requests_published_total",
    "API requests published (request key written and notice added to the requests stream).",
)
REQUESTS_REJECTED = Counter(
    "agentbus_requests_rejected_total",
    "Requests that failed validate_api_request and were dead-lettered instead of published, by rule.",
    ["rule"],
)
TRANSCRIPT_LINES = Counter(
    "agentbus_transcript_lines_appended_total",
    "Lines appended to JSONL transcripts (durable once counted).",
)
TRANSCRIPT_LINES_REMOVED = Counter(
    "agentbus_transcript_lines_removed_total",
    "Transcript lines removed because their message was tombstoned.",
)
TRANSCRIPT_TORN_TAILS = Counter(
    "agentbus_transcript_torn_tails_total",
    "Transcript files found at open with bytes after their last newline, by what was done: 'truncated' "
    "(a cut write, moved to <file>.torn) or 'terminated' (a complete line, newline added).",
    ["kind"],
)
TRANSCRIPT_TORN_TAIL_BYTES = Counter(
    "agentbus_transcript_torn_tail_bytes_total",
    "Bytes moved from transcripts to their <file>.torn sidecar by torn-tail repair.",
)
DUPLICATES_DROPPED = Counter(
    "agentbus_duplicates_dropped_total",
    "Redelivered or repeated items skipped by an idempotency check, by worker and kind.",
    ["worker", "kind"],
)
STREAM_ENTRIES_TRIMMED = Counter(
    "agentbus_stream_entries_trimmed_total",
    "Work-stream entries removed (XTRIM MINID) once every group that reads the stream had acknowledged them.",
    ["stream"],
)
TRANSCRIPT_APPEND_DURATION = Histogram(
    "agentbus_transcript_append_duration_seconds",
    "From writing a batch of lines to the batch being durable (group-committed fsync included).",
    buckets=LATENCY_BUCKETS,
)
TRANSCRIPT_FSYNC_DURATION = Histogram(
    "agentbus_transcript_fsync_duration_seconds",
    "Duration of one fsync of a transcript file.",
    buckets=FSYNC_BUCKETS,
)
END_TO_END_LATENCY = Histogram(
    "agentbus_end_to_end_latency_seconds",
    "From an event's ingress entry id timestamp to the stage named by 'stage'.",
    ["stage"],
    buckets=LATENCY_BUCKETS,
)
TRACEPARENT_INVALID = Counter(
    "agentbus_traceparent_invalid_total",
    "Entries whose traceparent could not be parsed (a new trace was started for them).",
    ["worker"],
)
BUILD_INFO = Info("agentbus_build", "Version and commit of the running agentbus build.")
RATE_LIMIT_WAIT_BUCKETS: Final = (0.001, 0.01, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0)
"""Seconds a model call waited for its tenant's requests/min and tokens/min budget."""
MODEL_RATE_LIMIT_WAIT = Histogram(
    "agentbus_model_rate_limit_wait_seconds",
    "Time a model call waited for its tenant's rate-limit budget (0 when it went at once), by the limit that "
    "made it wait (requests, tokens, none). No tenant label: tenants are open-ended.",
    ["limit"],
    buckets=RATE_LIMIT_WAIT_BUCKETS,
)
MODEL_RATE_LIMIT_WAITS = Counter(
    "agentbus_model_rate_limit_waits_total",
    "Model calls delayed by their tenant's rate limit, by the limit that made them wait.",
    ["limit"],
)

_consumed = BoundChildren(EVENTS_CONSUMED)
_produced = BoundChildren(EVENTS_PRODUCED)
_dead_lettered = BoundChildren(EVENTS_DEAD_LETTERED)
_batch_duration = BoundChildren(BATCH_DURATION)
_batch_size = BoundChildren(BATCH_SIZE)
_tool_executions = BoundChildren(TOOL_EXECUTIONS)
_tool_duration = BoundChildren(TOOL_DURATION)
_repairs = BoundChildren(NORMALIZATION_REPAIRS)
_rejected = BoundChildren(REQUESTS_REJECTED)
_duplicates = BoundChildren(DUPLICATES_DROPPED)
_torn_tails = BoundChildren(TRANSCRIPT_TORN_TAILS)
_trimmed = BoundChildren(STREAM_ENTRIES_TRIMMED)
_end_to_end = BoundChildren(END_TO_END_LATENCY)
_traceparent_invalid = BoundChildren(TRACEPARENT_INVALID)
_rate_limit_wait = BoundChildren(MODEL_RATE_LIMIT_WAIT)
_rate_limit_waits = BoundChildren(MODEL_RATE_LIMIT_WAITS)

_event_type = LabelGuard(EVENT_TYPES)
_repair_kind = LabelGuard(REPAIR_KINDS)
_reason = LabelGuard(capacity=32)
_rule = LabelGuard(capacity=64)
_duplicate_kind = LabelGuard(capacity=16)


def set_build_info(*, commit: str | None = None) -> None:
    """Publish ``agentbus_build_info{version, commit}`` (commit: see :mod:`agentbus_redis.config.build_info`)."""
    BUILD_INFO.info({"version": package_version(), "commit": commit or build_commit()})


set_build_info()


# ----------------------------------------------------------------------------------- per-batch recording
set_recording = switch.set_recording
recording = switch.recording


def record_batch(worker: WorkerType, stream: str, *, consumed: Mapping[str, int], duration_s: float) -> None:
    """One handled batch read from ``stream``: its event-type tally and how long the handler took.

    ``consumed`` maps event type → count (``collections.Counter`` of the decoded types; undecodable
    entries as ``invalid``). Unknown types are counted as ``other``.
    """
    if not switch.recording():
        return
    family = stream_family(stream)
    _batch_duration(worker, family).observe(duration_s)
    _batch_size(worker, family).observe(sum(consumed.values()))
    for event_type, count in consumed.items():
        _consumed(worker, family, _event_type(event_type)).inc(count)


def record_consumed(worker: WorkerType, stream: str, consumed: Mapping[str, int]) -> None:
    """Only the event-type tally of a batch (when the handler is timed by :func:`instrument_handler`)."""
    if not switch.recording():
        return
    family = stream_family(stream)
    for event_type, count in consumed.items():
        _consumed(worker, family, _event_type(event_type)).inc(count)


def record_produced(worker: WorkerType, stream: str, produced: Mapping[str, int]) -> None:
    """Entries a batch wrote to ``stream`` (any shard of it), by event type."""
    if not switch.recording():
        return
    family = stream_family(stream)
    for event_type, count in produced.items():
        _produced(worker, family, _event_type(event_type)).inc(count)


def record_dead_lettered(worker: WorkerType, stream: str, reasons: Mapping[str, int]) -> None:
    """Entries of ``stream`` the handler marked poison in one batch, by ``Poison.reason``."""
    if not switch.recording():
        return
    family = stream_family(stream)
    for reason, count in reasons.items():
        _dead_lettered(worker, family, _reason(reason)).inc(count)


def record_trimmed(removed: Mapping[str, int]) -> None:
    """Entries trimmed from each stream in one retention pass (labelled by stream family)."""
    if not switch.recording():
        return
    for stream, count in removed.items():
        _trimmed(stream_family(stream)).inc(count)


_tool_pool = "default"
"""The ``pool`` label of this process's tool executions: a tool worker serves one pool (tools/pools.py)."""


def set_tool_pool(pool: str) -> None:
    """Label this process's tool executions with ``pool`` (a valid pool name: bounded by the deployment)."""
    global _tool_pool
    _tool_pool = pool


def record_tool_execution(tool: str, outcome: ToolOutcome, duration_s: float | None = None) -> None:
    """One answered tool_use. ``duration_s`` is None for calls that did not run (placeholder, denied …)."""
    if not switch.recording():
        return
    label = tool_label(tool)
    _tool_executions(label, outcome, _tool_pool).inc()
    if duration_s is not None:
        _tool_duration(label, outcome, _tool_pool).observe(duration_s)


def record_repairs(kinds: Iterable[str]) -> None:
    """The ``Repair.kind`` values of one normalization report (``RepairKind`` is a ``StrEnum``)."""
    if not switch.recording():
        return
    tally: dict[str, int] = {}
    for kind in kinds:
        tally[kind] = tally.get(kind, 0) + 1
    for kind, count in tally.items():
        _repairs(_repair_kind(str(kind))).inc(count)


def record_repair_counts(counts: Mapping[str, int]) -> None:
    """A ``NormalizationReport.counts`` mapping (kind → repairs) of one request."""
    if not switch.recording():
        return
    for kind, count in counts.items():
        if count:
            _repairs(_repair_kind(str(kind))).inc(count)


def record_requests_published(count: int = 1) -> None:
    if not switch.recording():
        return
    REQUESTS_PUBLISHED.inc(count)


def record_request_rejected(rules: Iterable[str]) -> None:
    """One request refused by ``validate_api_request``: each distinct ``ApiViolation.rule`` counted once."""
    if not switch.recording():
        return
    for rule in set(rules):
        _rejected(_rule(rule)).inc()


def record_duplicates(worker: WorkerType, kind: str, count: int = 1) -> None:
    """Items skipped as already applied (``kind`` e.g. ``uuid``, ``idempotency_key``, ``tool_use_id``)."""
    if not switch.recording():
        return
    if count:
        _duplicates(worker, _duplicate_kind(kind)).inc(count)


def record_sandbox_network(reason: str) -> None:
    """The sandbox proxy allowed (``reason`` ``allowed``) or refused a request (reasons: a bounded set)."""
    if not switch.recording():
        return
    SANDBOX_NETWORK_REQUESTS.labels("allowed" if reason == "allowed" else "denied", reason).inc()


def record_stuck_ended(waiting_for: str) -> None:
    """The stuck-turn sweep ended a session's wait for ``waiting_for``."""
    if not switch.recording():
        return
    SESSIONS_STUCK_ENDED.labels(waiting_for).inc()


def record_transcript_append(*, lines: int, durable_s: float, removed: int = 0) -> None:
    """One durable transcript batch: ``lines`` appended, ``durable_s`` from write to fsync'd."""
    if not switch.recording():
        return
    TRANSCRIPT_LINES.inc(lines)
    if removed:
        TRANSCRIPT_LINES_REMOVED.inc(removed)
    TRANSCRIPT_APPEND_DURATION.observe(durable_s)


def record_torn_tail(kind: Literal["truncated", "terminated"], size: int) -> None:
    """One torn tail repaired at open: ``truncated`` moved ``size`` bytes to ``<file>.torn``."""
    if not switch.recording():
        return
    _torn_tails(kind).inc()
    if kind == "truncated":
        TRANSCRIPT_TORN_TAIL_BYTES.inc(size)


def observe_fsync(duration_s: float) -> None:
    """One fsync of a transcript file (called by the writer's fsync thread)."""
    if not switch.recording():
        return
    TRANSCRIPT_FSYNC_DURATION.observe(duration_s)


def record_traceparent_invalid(worker: WorkerType, count: int = 1) -> None:
    if not switch.recording():
        return
    _traceparent_invalid(worker).inc(count)


def record_rate_limit_wait(limit: Literal["none", "requests", "tokens"], wait_s: float) -> None:
    """One model call's wait for its tenant's budget (``limit``: which one made it wait; ``none``: it did not)."""
    if not switch.recording():
        return
    _rate_limit_wait(limit).observe(wait_s)
    if wait_s > 0:
        _rate_limit_waits(limit).inc()


def entry_id_ms(entry_id: str) -> int:
    """The millisecond timestamp part of a stream entry id (``1700000000000-3`` → ``1700000000000``)."""
    millis, _, _ = entry_id.partition("-")
    return int(millis)


def observe_end_to_end(stage: EndToEndStage, origins_ms: Iterable[int], *, now_ms: int | None = None) -> None:
    """End-to-end latency of each event reaching ``stage``, from its ingress entry's timestamp (epoch ms).

    Call once per batch with every event's origin; ``now_ms`` defaults to the wall clock (entry ids come
    from the Redis server's clock, so the figure includes any skew between the hosts).
    """
    now = now_ms if now_ms is not None else time.time_ns() // 1_000_000
    observe_stage_delays(stage, (now - origin for origin in origins_ms))


def observe_stage_delays(stage: EndToEndStage, delays_ms: Iterable[int]) -> None:
    """End-to-end latencies already computed (e.g. ``log_written``: the log entry id's time minus the
    ingress entry id's time, both from the Redis server's clock, so free of host skew)."""
    if not switch.recording():
        return
    observe = _end_to_end(stage).observe
    for delay in delays_ms:
        observe(max(delay, 0) / 1000)


BatchHandlerFn = Callable[[list[StreamEntry]], Awaitable[BatchOutcome]]


def instrument_handler(worker: WorkerType, handler: BatchHandlerFn) -> BatchHandlerFn:
    """Wrap a ``BatchConsumer`` handler so each call records its duration and batch size.

    Failed calls are timed too (the consumer then retries entry by entry, each retry is a call). With
    recording off (``set_recording``) the handler is returned as it is.
    """
    if not switch.recording():
        return handler
    perf_counter = time.perf_counter

    async def timed(entries: list[StreamEntry]) -> BatchOutcome:
        started = perf_counter()
        try:
            return await handler(entries)
        finally:
            if entries:
                family = stream_family(entries[0].stream)
                _batch_duration(worker, family).observe(perf_counter() - started)
                _batch_size(worker, family).observe(len(entries))

    return timed


# ------------------------------------------------------------------------------------------------ catalog
DEFINED_HERE: Final = (
    EVENTS_CONSUMED,
    EVENTS_PRODUCED,
    EVENTS_DEAD_LETTERED,
    BATCH_DURATION,
    BATCH_SIZE,
    TOOL_EXECUTIONS,
    TOOL_DURATION,
    NORMALIZATION_REPAIRS,
    REQUESTS_PUBLISHED,
    REQUESTS_REJECTED,
    TRANSCRIPT_LINES,
    TRANSCRIPT_LINES_REMOVED,
    DUPLICATES_DROPPED,
    STREAM_ENTRIES_TRIMMED,
    TRANSCRIPT_APPEND_DURATION,
    TRANSCRIPT_FSYNC_DURATION,
    END_TO_END_LATENCY,
    TRACEPARENT_INVALID,
    BUILD_INFO,
    MODEL_RATE_LIMIT_WAIT,
    MODEL_RATE_LIMIT_WAITS,
    SESSIONS_STUCK_ENDED,
    SANDBOX_NETWORK_REQUESTS,
)

_SAMPLE_SUFFIXES: Final = {
    "counter": ("_total",),
    "gauge": ("",),
    "histogram": ("_bucket", "_count", "_sum"),
    "summary": ("", "_count", "_sum"),
    "info": ("_info",),
    "stateset": ("",),
    "unknown": ("",),
}


def metric_families() -> list[Metric]:
    """Every ``agentbus_*`` family a worker exports: the metrics above and the two collectors' families."""
    families: list[Metric] = []
    for metric in DEFINED_HERE:
        families.extend(metric.describe())
    families.extend(consumer_metrics.describe_metrics())
    families.extend(stream_stats.describe_metrics())
    for model_metric in model_metrics.DEFINED:  # the model worker's (gen_ai_* and agentbus_model_*)
        families.extend(model_metric.describe())
    families.extend(approval_metrics.describe_metrics())
    return families


def exported_sample_names() -> frozenset[str]:
    """The sample names (``_total``, ``_bucket``, … included) that PromQL can reference."""
    return frozenset(family.name + suffix for family in metric_families() for suffix in _SAMPLE_SUFFIXES[family.type])
