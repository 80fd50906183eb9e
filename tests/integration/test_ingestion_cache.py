"""Ingestion's in-memory ledgers against a real Redis: a fresh owner (restart, shard takeover) continues
exactly where the cache left off, and the cache never holds what a failed transaction did not write.

The ledger state is stored without the raw events of open streaming replies (they live in one Redis
list per reply), so these tests also check that a reply half-streamed under one owner completes the
same under the next (R9 accumulation, R9.5 held-back block) and that its list goes once it completes.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
import redis.asyncio as aioredis

from agentbus_redis.bus.events import (
    AssistantReply,
    IngressEnvelope,
    LogEntry,
    StreamEvent,
    ToolResultReport,
    UserPrompt,
    parse_log_entry,
)
from agentbus_redis.bus.ingress_limits import DEFAULT_MAX_INGRESS_ENTRY_BYTES
from agentbus_redis.cli.local.demo import stream_events_for
from agentbus_redis.messages.content import TextBlock, ToolResultBlock, ToolUseBlock
from agentbus_redis.messages.factories import create_assistant_message, create_user_message
from agentbus_redis.runtime.codec import entry_fields, signed_entry_fields
from agentbus_redis.runtime.consumer import BatchConsumer, BatchOutcome, ConsumerConfig
from agentbus_redis.runtime.key_calls import KeyCalls
from agentbus_redis.streams.entries import StreamEntry
from agentbus_redis.streams.names import StreamNames
from agentbus_redis.streams.topology import INGESTION_GROUP, Topology
from agentbus_redis.workers.ingestion import ledger_cache
from agentbus_redis.workers.ingestion import worker as ingestion_worker
from agentbus_redis.workers.ingestion.worker import IngestionWorker

pytestmark = pytest.mark.integration

TOPOLOGY = Topology(StreamNames(prefix="cachetest:", shards=1))
SESSION = "cache-session"
INTERNAL_KEY = b"test-internal-key"
MAX_ENTRY_BYTES = DEFAULT_MAX_INGRESS_ENTRY_BYTES
ONE_BY_ONE = ConsumerConfig(count=1, block_ms=20, ordered=True, transactional=True)
ALL_AT_ONCE = ConsumerConfig(count=100, block_ms=20, ordered=True, transactional=True)


SESSIONS = (SESSION, "cache-session-2", "cache-session-3")


def _reply_events(tag: str) -> list[StreamEvent]:
    call = ToolUseBlock(id=f"toolu_{tag}", name="Read", input={"file_path": f"{tag}.py"})
    events = stream_events_for(
        [TextBlock(text=f"Let me read {tag}."), call, TextBlock(text="Reading now.")],
        message_id=f"msg_{tag}",
        model="claude-test",
    )
    return [StreamEvent(request_id=f"req_{tag}", event=event, execute_tools=False) for event in events]


def _envelopes() -> list[IngressEnvelope]:
    """Three sessions interleaved, each a prompt then a streamed reply."""
    per_session = []
    for number, session in enumerate(SESSIONS):
        payloads: list[Any] = [UserPrompt(content=f"read {number}.py"), *_reply_events(f"cache{number}")]
        per_session.append(
            [
                IngressEnvelope(session_id=session, idempotency_key=f"k{index}", payload=payload)
                for index, payload in enumerate(payloads)
            ]
        )
    return [envelope for step in zip(*per_session, strict=True) for envelope in step]


async def _publish(redis: aioredis.Redis, envelopes: list[IngressEnvelope]) -> None:
    """XADD as their producers would: tool results for dispatched calls come from a tool worker (signed)."""
    for envelope in envelopes:
        if isinstance(envelope.payload, ToolResultReport):
            fields = signed_entry_fields(envelope, INTERNAL_KEY)
        else:
            fields = entry_fields(envelope)
        await redis.xadd(TOPOLOGY.ingress(0), fields)  # type: ignore[arg-type]


def _consumer(
    redis: aioredis.Redis, worker: IngestionWorker, name: str, config: ConsumerConfig = ONE_BY_ONE
) -> BatchConsumer:
    return BatchConsumer(
        redis,
        stream=TOPOLOGY.ingress(0),
        group=INGESTION_GROUP,
        consumer=name,
        handler=worker.handler_for(0, 1),
        config=config,
    )


async def _consume(consumer: BatchConsumer, count: int) -> None:
    """Run the consumer until it has applied and acked ``count`` more entries (a safety timeout only)."""
    target = consumer.stats.acked + count
    consumer.start()
    async with asyncio.timeout(20):
        while consumer.stats.acked < target:
            await asyncio.sleep(0.005)
    await consumer.stop()


async def _log(redis: aioredis.Redis) -> list[LogEntry]:
    rows: Any = await redis.xrange(TOPOLOGY.log(0))
    return [parse_log_entry(fields[b"data"]) for _, fields in rows]


def _comparable(entries: list[LogEntry]) -> list[tuple[int, str, object]]:
    """seq, type and message payload (uuids differ between runs: ids are random)."""
    return [(e.seq, e.message.type, getattr(e.message, "message", None)) for e in entries]


def _assert_chained(entries: list[LogEntry]) -> None:
    """R7.8: each logged message's parentUuid is the uuid of the message logged before it."""
    parent = None
    for entry in entries:
        assert getattr(entry.message, "parent_uuid", None) == parent
        parent = entry.message.uuid  # type: ignore[union-attr]


async def test_r9_reply_half_streamed_then_taken_over_completes_the_same(aredis: aioredis.Redis) -> None:
    """A new owner (empty cache) rebuilds the open replies from their Redis lists and logs what one owner
    would (several sessions, each with earlier keys and a reply in progress at the takeover)."""
    envelopes = _envelopes()
    await _publish(aredis, envelopes)
    single = IngestionWorker(
        aredis, TOPOLOGY, tool_deadline_ms=60_000, internal_key=INTERNAL_KEY, max_entry_bytes=MAX_ENTRY_BYTES
    )
    await _consume(_consumer(aredis, single, "only"), len(envelopes))
    reference = await _log(aredis)
    await aredis.flushall()

    half = len(SESSIONS) * 6
    await _publish(aredis, envelopes[:half])
    first = IngestionWorker(
        aredis, TOPOLOGY, tool_deadline_ms=60_000, internal_key=INTERNAL_KEY, max_entry_bytes=MAX_ENTRY_BYTES
    )
    await _consume(_consumer(aredis, first, "first"), half)
    # Mid-reply: the state JSON holds no raw events; each reply's list holds every one seen so far.
    for number, session in enumerate(SESSIONS):
        raw_state = await aredis.get(TOPOLOGY.ledger(session))
        assert raw_state is not None
        assert b'"events"' not in raw_state
        assert await aredis.llen(TOPOLOGY.reply_events(session, f"req_cache{number}")) == 5

    await _publish(aredis, envelopes[half:])
    second = IngestionWorker(
        aredis, TOPOLOGY, tool_deadline_ms=60_000, internal_key=INTERNAL_KEY, max_entry_bytes=MAX_ENTRY_BYTES
    )
    # One batch: the new owner loads every session (state, reply events, applied keys) at once.
    await _consume(_consumer(aredis, second, "second", ALL_AT_ONCE), len(envelopes) - half)
    taken_over = await _log(aredis)

    assert _comparable(taken_over) == _comparable(reference)
    for session in SESSIONS:
        _assert_chained([entry for entry in taken_over if entry.session_id == session])
    assert await aredis.keys(TOPOLOGY.reply_events("*", "*")) == []


async def test_duplicate_idempotency_keys_dropped_by_owner_and_by_next_owner(aredis: aioredis.Redis) -> None:
    """A producer's retry is applied once: caught from the cached key set and, after a takeover, from Redis."""
    prompt = IngressEnvelope(session_id=SESSION, idempotency_key="p1", payload=UserPrompt(content="hi"))
    await _publish(aredis, [prompt, prompt])
    owner = IngestionWorker(
        aredis, TOPOLOGY, tool_deadline_ms=60_000, internal_key=INTERNAL_KEY, max_entry_bytes=MAX_ENTRY_BYTES
    )
    await _consume(_consumer(aredis, owner, "owner"), 2)
    assert owner.dropped_total == 1

    await _publish(aredis, [prompt])
    successor = IngestionWorker(
        aredis, TOPOLOGY, tool_deadline_ms=60_000, internal_key=INTERNAL_KEY, max_entry_bytes=MAX_ENTRY_BYTES
    )
    await _consume(_consumer(aredis, successor, "successor"), 1)
    assert successor.dropped_total == 1
    assert [entry.seq for entry in await _log(aredis)] == [1]


async def test_closed_calls_live_in_the_answered_set_and_a_new_owner_restores_them(aredis: aioredis.Redis) -> None:
    """The state JSON written every batch holds no closed call ids (they grow with the session; the
    ``answered`` set has them): a new owner reads the set back, so a repeated result is still dropped."""
    call = ToolUseBlock(id="toolu_closed", name="Read", input={"file_path": "a.py"})

    def result(text: str) -> ToolResultReport:
        return ToolResultReport(message=create_user_message([ToolResultBlock(tool_use_id=call.id, content=text)]))

    payloads: list[Any] = [
        UserPrompt(content="read a.py"),
        AssistantReply(message=create_assistant_message([TextBlock(text="Reading."), call])),
        result("first"),
    ]
    await _publish(
        aredis,
        [IngressEnvelope(session_id=SESSION, idempotency_key=f"k{n}", payload=p) for n, p in enumerate(payloads)],
    )
    owner = IngestionWorker(
        aredis, TOPOLOGY, tool_deadline_ms=60_000, internal_key=INTERNAL_KEY, max_entry_bytes=MAX_ENTRY_BYTES
    )
    await _consume(_consumer(aredis, owner, "owner"), len(payloads))
    raw_state = await aredis.get(TOPOLOGY.ledger(SESSION))
    assert raw_state is not None
    assert b"toolu_closed" not in raw_state
    assert await aredis.smembers(TOPOLOGY.answered(SESSION)) == {b"toolu_closed"}

    await _publish(aredis, [IngressEnvelope(session_id=SESSION, idempotency_key="again", payload=result("again"))])
    successor = IngestionWorker(
        aredis, TOPOLOGY, tool_deadline_ms=60_000, internal_key=INTERNAL_KEY, max_entry_bytes=MAX_ENTRY_BYTES
    )
    await _consume(_consumer(aredis, successor, "successor"), 1)
    assert successor.dropped_total == 1
    results = [entry for entry in await _log(aredis) if entry.message.type == "user" and entry.seq > 1]
    assert len(results) == 1


async def test_a_quiet_sessions_idempotency_keys_expire(aredis: aioredis.Redis) -> None:
    """The applied-key set gets a TTL, refreshed (at most once a minute) while the session is active."""
    prompt = IngressEnvelope(session_id=SESSION, idempotency_key="p1", payload=UserPrompt(content="hi"))
    other = IngressEnvelope(session_id="cache-session-2", idempotency_key="p1", payload=UserPrompt(content="hi"))
    await _publish(aredis, [prompt])
    await _consume(
        _consumer(
            aredis,
            IngestionWorker(
                aredis, TOPOLOGY, tool_deadline_ms=60_000, internal_key=INTERNAL_KEY, max_entry_bytes=MAX_ENTRY_BYTES
            ),
            "forever",
        ),
        1,
    )
    assert await aredis.pttl(TOPOLOGY.seen_keys(SESSION)) == -1  # no TTL configured: kept forever

    await _publish(aredis, [other])
    worker = IngestionWorker(
        aredis,
        TOPOLOGY,
        tool_deadline_ms=60_000,
        internal_key=INTERNAL_KEY,
        max_entry_bytes=MAX_ENTRY_BYTES,
        idempotency_ttl_ms=3_600_000,
    )
    await _consume(_consumer(aredis, worker, "ttl"), 1)
    assert 3_500_000 < await aredis.pttl(TOPOLOGY.seen_keys("cache-session-2")) <= 3_600_000


async def test_sessions_with_many_keys_are_checked_against_redis(
    aredis: aioredis.Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Past the in-memory limit a session's keys are no longer cached, and duplicates are still caught."""
    monkeypatch.setattr(ledger_cache, "MAX_SEEN_KEYS_PER_SESSION", 2)
    monkeypatch.setattr(ingestion_worker, "MAX_SEEN_KEYS_PER_SESSION", 2)
    prompts = [
        IngressEnvelope(session_id=SESSION, idempotency_key=f"p{n}", payload=UserPrompt(content=f"q{n}"))
        for n in range(4)
    ]
    await _publish(aredis, prompts)
    worker = IngestionWorker(
        aredis, TOPOLOGY, tool_deadline_ms=60_000, internal_key=INTERNAL_KEY, max_entry_bytes=MAX_ENTRY_BYTES
    )
    consumer = _consumer(aredis, worker, "owner")
    await _consume(consumer, len(prompts))
    cached = worker.cache.take(0, SESSION)
    assert cached is not None
    assert cached.seen is None
    worker.cache.put_back(0, {SESSION: cached})

    await _publish(aredis, [prompts[1], prompts[3]])
    await _consume(consumer, 2)
    assert worker.dropped_total == 2
    assert [entry.seq for entry in await _log(aredis)] == [1, 2, 3, 4]


async def test_cache_keeps_only_ledgers_whose_transaction_succeeded(aredis: aioredis.Redis) -> None:
    """A batch whose write fails leaves its sessions out of the cache: the next batch reloads Redis's state."""
    call = ToolUseBlock(id="toolu_cache_2", name="Read", input={"file_path": "b.py"})
    reply = create_assistant_message([TextBlock(text="Reading."), call])
    result = create_user_message([ToolResultBlock(tool_use_id=call.id, content="b")])
    worker = IngestionWorker(
        aredis, TOPOLOGY, tool_deadline_ms=60_000, internal_key=INTERNAL_KEY, max_entry_bytes=MAX_ENTRY_BYTES
    )
    consumer = _consumer(aredis, worker, "owner")
    await _publish(
        aredis,
        [
            IngressEnvelope(session_id=SESSION, idempotency_key="p1", payload=UserPrompt(content="read b.py")),
            IngressEnvelope(session_id=SESSION, idempotency_key="a1", payload=AssistantReply(message=reply)),
        ],
    )
    await _consume(consumer, 2)
    assert len(worker.cache) == 1
    # Only the batch's state write touches this key (the answered calls): make it fail there.
    await aredis.set(TOPOLOGY.answered(SESSION), "not a set")
    await _publish(
        aredis, [IngressEnvelope(session_id=SESSION, idempotency_key="r1", payload=ToolResultReport(message=result))]
    )
    consumer.start()
    async with asyncio.timeout(20):
        while consumer.stats.write_errors == 0:
            await asyncio.sleep(0.005)
    await consumer.stop()
    assert len(worker.cache) == 0


async def test_on_settled_called_only_after_a_complete_write(aredis: aioredis.Redis) -> None:
    """``BatchOutcome.on_settled`` runs once the batch's pipeline wrote everything, never after an error."""
    settled: list[str] = []

    def outcome(tag: str, failing: bool) -> BatchOutcome:
        def write(calls: KeyCalls) -> None:
            calls.add("INCR", "cachetest:counter" if not failing else "cachetest:not-a-number")

        return BatchOutcome(write=write, on_settled=lambda: settled.append(tag))

    await aredis.set("cachetest:not-a-number", "x")
    outcomes = iter([outcome("ok", failing=False), outcome("failed", failing=True)])

    async def handle(batch: list[StreamEntry]) -> BatchOutcome:
        return next(outcomes)

    stream = "cachetest:settled"
    await aredis.xadd(stream, {"data": b"1"})
    await aredis.xadd(stream, {"data": b"2"})
    consumer = BatchConsumer(
        aredis, stream=stream, group="g", consumer="c", handler=handle, config=ConsumerConfig(count=1, block_ms=20)
    )
    consumer.start()
    async with asyncio.timeout(20):
        while consumer.stats.batches < 2:
            await asyncio.sleep(0.005)
    await consumer.stop()
    assert settled == ["ok"]
