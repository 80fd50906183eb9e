"""Metrics: bounded labels, per-batch recording, the ConsumerStats collector and the stream-stats poller
(against a real Redis)."""

from __future__ import annotations

import asyncio

import pytest
import redis.asyncio as aioredis
from prometheus_client import REGISTRY, CollectorRegistry, generate_latest

from agentbus_redis.config.settings import Settings
from agentbus_redis.normalize.report import RepairKind
from agentbus_redis.observability import metrics
from agentbus_redis.observability.consumer_metrics import ConsumerStatsCollector
from agentbus_redis.observability.labels import OTHER, LabelGuard, stream_family, tool_label
from agentbus_redis.observability.stream_stats import StreamStatsPoller, WatchedStream
from agentbus_redis.runtime.consumer import BatchConsumer, BatchOutcome, ConsumerConfig, Poison
from agentbus_redis.streams.entries import StreamEntry


def sample(name: str, **labels: str) -> float:
    value = REGISTRY.get_sample_value(name, labels)
    return 0.0 if value is None else value


# -------------------------------------------------------------------------------------------- labels
@pytest.mark.parametrize(
    ("stream", "family"),
    [
        ("agentbus:{s03}:ingress", "ingress"),
        ("agentbus:{s15}:log", "log"),
        ("agentbus:tools:jobs", "tool_jobs"),
        ("agentbus:requests", "requests"),
        ("agentbus:{s03}:ingress:dlq", "ingress_dlq"),
        ("agentbus:tools:jobs:dlq", "tool_jobs_dlq"),
        ("agentbus:{s03-41}:tools:pool:weather:jobs", "tool_jobs"),  # a tool pool's jobs (issue 29)
        ("agentbus:{s03-41}:tools:pool:weather:jobs:dlq", "tool_jobs_dlq"),
        ("other-prefix:{s01}:log", "log"),
        ("ingress", "ingress"),
        ("log_dlq", "log_dlq"),
        ("agentbus:{s01}:session:9f1c:events", OTHER),
    ],
)
def test_stream_family_never_carries_a_shard_or_session(stream: str, family: str) -> None:
    assert stream_family(stream) == family


def test_label_guard_allowlist_and_capacity() -> None:
    allow = LabelGuard({"a", "b"})
    assert [allow("a"), allow("z")] == ["a", OTHER]
    free = LabelGuard(capacity=2)
    assert [free("x"), free("y"), free("z"), free("x")] == ["x", "y", OTHER, "x"]
    assert free("bad value with spaces") == OTHER


def test_tool_label_folds_open_ended_names() -> None:
    assert [tool_label("Bash"), tool_label("mcp__github__create_issue"), tool_label("MyTool")] == [
        "Bash",
        "mcp",
        OTHER,
    ]


# ------------------------------------------------------------------------------------------ recording
def test_record_batch_counts_types_by_family_with_unknown_types_as_other() -> None:
    labels = {"worker": "ingestion", "stream": "ingress"}
    before_prompt = sample("agentbus_events_consumed_total", **labels, type="user_prompt")
    before_other = sample("agentbus_events_consumed_total", **labels, type=OTHER)
    before_batches = sample("agentbus_batch_duration_seconds_count", **labels)
    metrics.record_batch(
        "ingestion",
        "agentbus:{s02}:ingress",
        consumed={"user_prompt": 3, "session-1234-as-type": 1},
        duration_s=0.002,
    )
    assert sample("agentbus_events_consumed_total", **labels, type="user_prompt") == before_prompt + 3
    assert sample("agentbus_events_consumed_total", **labels, type=OTHER) == before_other + 1
    assert sample("agentbus_batch_duration_seconds_count", **labels) == before_batches + 1
    exposition = generate_latest(REGISTRY).decode()
    assert "session-1234" not in exposition
    assert "{s02}" not in exposition


def test_record_tool_execution_outcomes_and_duration() -> None:
    before = sample("agentbus_tool_executions_total", tool="Bash", outcome="timeout", pool="default")
    before_hist = sample(
        "agentbus_tool_execution_duration_seconds_count", tool="Bash", outcome="timeout", pool="default"
    )
    metrics.record_tool_execution("Bash", "timeout", 120.0)
    metrics.record_tool_execution("Bash", "timeout")
    assert sample("agentbus_tool_executions_total", tool="Bash", outcome="timeout", pool="default") == before + 2
    assert (
        sample("agentbus_tool_execution_duration_seconds_count", tool="Bash", outcome="timeout", pool="default")
        == before_hist + 1
    )


def test_record_repairs_uses_repair_kind_values() -> None:
    kind = RepairKind.PLACEHOLDER_TOOL_RESULT_INSERTED
    before = sample("agentbus_normalization_repairs_total", kind=kind.value)
    before_other = sample("agentbus_normalization_repairs_total", kind=OTHER)
    metrics.record_repairs([kind, kind, "not_a_kind"])
    assert sample("agentbus_normalization_repairs_total", kind=kind.value) == before + 2
    assert sample("agentbus_normalization_repairs_total", kind=OTHER) == before_other + 1


def test_requests_published_and_rejected() -> None:
    before = sample("agentbus_requests_published_total")
    before_rule = sample("agentbus_requests_rejected_total", rule="invalid_block")
    metrics.record_requests_published(2)
    metrics.record_request_rejected(["invalid_block", "invalid_block"])
    assert sample("agentbus_requests_published_total") == before + 2
    assert sample("agentbus_requests_rejected_total", rule="invalid_block") == before_rule + 1


def test_transcript_and_end_to_end_latency() -> None:
    before_lines = sample("agentbus_transcript_lines_appended_total")
    before_e2e = sample("agentbus_end_to_end_latency_seconds_count", stage="transcript_durable")
    before_fast = sample("agentbus_end_to_end_latency_seconds_bucket", stage="transcript_durable", le="0.005")
    metrics.record_transcript_append(lines=5, durable_s=0.003)
    metrics.observe_fsync(0.0008)
    origin = metrics.entry_id_ms("1700000000000-7")
    assert origin == 1_700_000_000_000
    metrics.observe_end_to_end("transcript_durable", [origin, origin - 1000], now_ms=origin + 4)
    assert sample("agentbus_transcript_lines_appended_total") == before_lines + 5
    assert sample("agentbus_end_to_end_latency_seconds_count", stage="transcript_durable") == before_e2e + 2
    # 4 ms lands in the 5 ms bucket; the 1.004 s one does not.
    assert sample("agentbus_end_to_end_latency_seconds_bucket", stage="transcript_durable", le="0.005") == (
        before_fast + 1
    )


def test_build_info_is_published() -> None:
    assert sample("agentbus_build_info", version=_version(), commit=_commit()) == 1.0


def _version() -> str:
    from importlib.metadata import version

    return version("agentbus-redis")


def _commit() -> str:
    from agentbus_redis.config.build_info import build_commit

    return build_commit()


async def test_instrument_handler_times_each_call() -> None:
    async def handler(entries: list[StreamEntry]) -> BatchOutcome:
        return BatchOutcome()

    labels = {"worker": "transcripts", "stream": "log"}
    before = sample("agentbus_batch_duration_seconds_count", **labels)
    before_size = sample("agentbus_batch_entries_sum", **labels)
    timed = metrics.instrument_handler("transcripts", handler)
    entries = [StreamEntry("agentbus:{s01}:log", f"1-{i}", {"data": b"{}"}) for i in range(3)]
    await timed(entries)
    assert sample("agentbus_batch_duration_seconds_count", **labels) == before + 1
    assert sample("agentbus_batch_entries_sum", **labels) == before_size + 3


async def test_recording_off_records_nothing_and_leaves_handlers_untimed() -> None:
    """``AGENTBUS_METRICS=false`` (issue 5's on/off benchmark): every record call is a no-op."""

    async def handler(entries: list[StreamEntry]) -> BatchOutcome:
        return BatchOutcome()

    labels = {"worker": "ingestion", "stream": "ingress"}
    before = sample("agentbus_events_consumed_total", **labels, type="user_prompt")
    before_e2e = sample("agentbus_end_to_end_latency_seconds_count", stage="log_written")
    metrics.set_recording(False)
    try:
        metrics.record_batch("ingestion", "agentbus:{s02}:ingress", consumed={"user_prompt": 3}, duration_s=0.1)
        metrics.record_consumed("ingestion", "agentbus:{s02}:ingress", {"user_prompt": 2})
        metrics.observe_end_to_end("log_written", [1])
        assert metrics.instrument_handler("ingestion", handler) is handler
    finally:
        metrics.set_recording(True)
    assert sample("agentbus_events_consumed_total", **labels, type="user_prompt") == before
    assert sample("agentbus_end_to_end_latency_seconds_count", stage="log_written") == before_e2e
    metrics.record_consumed("ingestion", "agentbus:{s02}:ingress", {"user_prompt": 2})
    assert sample("agentbus_events_consumed_total", **labels, type="user_prompt") == before + 2


def test_metrics_switch_is_read_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AGENTBUS_METRICS", "false")
    assert Settings().metrics is False
    monkeypatch.delenv("AGENTBUS_METRICS")
    assert Settings().metrics is True


def test_exported_sample_names_cover_every_family() -> None:
    names = metrics.exported_sample_names()
    assert "agentbus_stream_lag" in names
    assert "agentbus_consumer_entries_consumed_total" in names
    assert "agentbus_end_to_end_latency_seconds_bucket" in names
    assert "agentbus_build_info" in names
    # agentbus_* metrics, and the model worker's OTel GenAI client instruments (M11.5, M11.6)
    assert all(name.startswith(("agentbus_", "gen_ai_client_")) for name in names)
    assert "gen_ai_client_token_usage_bucket" in names


# ----------------------------------------------------------------------------- ConsumerStats collector
@pytest.fixture
def private_registry() -> tuple[CollectorRegistry, ConsumerStatsCollector]:
    registry = CollectorRegistry()
    collector = ConsumerStatsCollector()
    registry.register(collector)
    return registry, collector


async def _drain(consumer: BatchConsumer, expected: int) -> None:
    consumer.start()
    for _ in range(500):
        if consumer.stats.acked + consumer.stats.dead_lettered >= expected:
            break
        await asyncio.sleep(0.01)
    await consumer.stop(timeout_s=5)


async def test_consumer_stats_published_and_monotonic_across_retirement(
    aredis: aioredis.Redis, private_registry: tuple[CollectorRegistry, ConsumerStatsCollector]
) -> None:
    registry, collector = private_registry
    stream = "agentbus:{s04}:log"

    async def handler(entries: list[StreamEntry]) -> BatchOutcome:
        poison = {entry.entry_id: Poison("decode_error") for entry in entries if entry.fields.get("bad")}
        return BatchOutcome(poison=poison)

    live: list[BatchConsumer] = []
    collector.track("transcripts", lambda: live)
    for i in range(5):
        await aredis.xadd(stream, {"data": b"{}", **({"bad": b"1"} if i == 0 else {})})
    first = BatchConsumer(
        aredis,
        stream=stream,
        group="transcripts",
        consumer="c1",
        handler=handler,
        config=ConsumerConfig(block_ms=10),
    )
    live.append(first)
    await _drain(first, 5)
    labels = {"worker": "transcripts", "stream": "log", "group": "transcripts"}
    assert registry.get_sample_value("agentbus_consumer_entries_consumed_total", labels) == 5
    assert registry.get_sample_value("agentbus_consumer_entries_acked_total", labels) == 5
    assert registry.get_sample_value("agentbus_consumer_entries_dead_lettered_total", labels) == 1
    assert registry.get_sample_value("agentbus_consumers", labels) == 1
    assert registry.get_sample_value("agentbus_consumer_progress_age_seconds", labels) is not None

    # The shard moves to another consumer object: the first one's counts stay in the totals.
    live.clear()
    for _ in range(2):
        await aredis.xadd(stream, {"data": b"{}"})
    second = BatchConsumer(
        aredis, stream=stream, group="transcripts", consumer="c2", handler=handler, config=ConsumerConfig(block_ms=10)
    )
    live.append(second)
    await _drain(second, 2)
    assert registry.get_sample_value("agentbus_consumer_entries_consumed_total", labels) == 7
    assert registry.get_sample_value("agentbus_consumer_entries_acked_total", labels) == 7
    assert registry.get_sample_value("agentbus_consumers", labels) == 1
    live.clear()
    assert registry.get_sample_value("agentbus_consumer_entries_consumed_total", labels) == 7
    assert registry.get_sample_value("agentbus_consumers", labels) == 0


# ---------------------------------------------------------------------------------- stream-stats poller
async def test_stream_stats_lag_pending_length_and_missing_group(aredis: aioredis.Redis) -> None:
    lane = "agentbus:{s01}:ingress"
    missing = "agentbus:{s02}:ingress"
    await aredis.xgroup_create(lane, "ingestion", id="0", mkstream=True)
    for _ in range(5):
        await aredis.xadd(lane, {"data": b"{}"})
    await aredis.xreadgroup("ingestion", "c1", {lane: ">"}, count=2)
    await aredis.xadd(lane + ":dlq", {"reason": b"x"})
    poller = StreamStatsPoller(
        aredis,
        [
            WatchedStream(lane, "ingestion", 1),
            WatchedStream(missing, "ingestion", 2),
            WatchedStream("agentbus:requests", None),
        ],
    )
    registry = CollectorRegistry()
    registry.register(poller)
    await poller.poll_once()

    def value(name: str, **labels: str) -> float | None:
        return registry.get_sample_value(name, labels)

    assert value("agentbus_stream_lag", stream="ingress", group="ingestion", shard="1") == 3
    assert value("agentbus_stream_pending", stream="ingress", group="ingestion", shard="1") == 2
    assert value("agentbus_stream_length", stream="ingress", shard="1") == 5
    assert value("agentbus_stream_length", stream="ingress_dlq", shard="1") == 1
    assert value("agentbus_stream_group_present", stream="ingress", group="ingestion", shard="1") == 1
    oldest = value("agentbus_stream_oldest_pending_age_seconds", stream="ingress", group="ingestion", shard="1")
    assert oldest is not None
    assert oldest >= 0
    assert value("agentbus_stream_group_present", stream="ingress", group="ingestion", shard="2") == 0
    assert value("agentbus_stream_lag", stream="ingress", group="ingestion", shard="2") is None
    assert value("agentbus_stream_length", stream="requests", shard="") == 0


async def test_stream_stats_lag_unknown_after_deletion_is_not_published(aredis: aioredis.Redis) -> None:
    """XINFO GROUPS reports a NULL lag once entries inside the group's range are deleted (ecosystem §4.9)."""
    lane = "agentbus:{s03}:log"
    await aredis.xgroup_create(lane, "normalization", id="0", mkstream=True)
    ids = [await aredis.xadd(lane, {"data": b"{}"}) for _ in range(4)]
    await aredis.xreadgroup("normalization", "c1", {lane: ">"}, count=1)
    await aredis.xdel(lane, ids[2])
    poller = StreamStatsPoller(aredis, [WatchedStream(lane, "normalization", 3)])
    registry = CollectorRegistry()
    registry.register(poller)
    await poller.poll_once()
    labels = {"stream": "log", "group": "normalization", "shard": "3"}
    assert registry.get_sample_value("agentbus_stream_lag", labels) is None
    assert registry.get_sample_value("agentbus_stream_pending", labels) == 1


async def test_stream_stats_poller_keeps_last_snapshot_when_redis_fails(redis_url: str) -> None:
    client = aioredis.Redis.from_url(redis_url)
    poller = StreamStatsPoller(client, [WatchedStream("agentbus:tools:jobs", "tools")], interval_s=0.01)
    await poller.poll_once()
    assert poller.snapshot is not None
    await client.aclose()
    broken = aioredis.Redis(port=1, socket_connect_timeout=0.2)
    poller.redis = broken
    task = poller.start()
    for _ in range(300):
        if poller.errors:
            break
        await asyncio.sleep(0.01)
    await poller.stop()
    assert task.done()
    assert poller.errors >= 1
    registry = CollectorRegistry()
    registry.register(poller)
    assert registry.get_sample_value("agentbus_stream_stats_errors_total") == poller.errors
    assert (
        registry.get_sample_value(
            "agentbus_stream_group_present", {"stream": "tool_jobs", "group": "tools", "shard": ""}
        )
        == 0
    )
    await broken.aclose()


def test_log_written_latency_is_observed_from_precomputed_delays() -> None:
    """``log_written``: log entry id time minus ingress id time (both Redis-clock), negative clamped to 0."""
    before = sample("agentbus_end_to_end_latency_seconds_count", stage="log_written")
    before_zero = sample("agentbus_end_to_end_latency_seconds_bucket", stage="log_written", le="0.001")
    metrics.observe_stage_delays("log_written", [0, 3, -2])
    assert sample("agentbus_end_to_end_latency_seconds_count", stage="log_written") == before + 3
    assert sample("agentbus_end_to_end_latency_seconds_bucket", stage="log_written", le="0.001") == before_zero + 2
