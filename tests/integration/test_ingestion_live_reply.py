"""Ingestion's live reply stream (bus/live_reply.py) against a real Redis: the text and thinking deltas
it applies, coalesced per block within a batch, positioned against the log (``after_seq``), written in
the batch's one atomic write, and nothing for what it did not apply (a duplicate key, a bad event)."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
import redis.asyncio as aioredis

from agentbus_redis.bus.events import IngressEnvelope, IngressPayload, StreamEvent, UserPrompt, parse_log_entry
from agentbus_redis.bus.ingress_limits import DEFAULT_MAX_INGRESS_ENTRY_BYTES
from agentbus_redis.bus.live_reply import LIVE_REPLY_TTL_MS, LiveDelta, parse_live_delta
from agentbus_redis.cli.local.demo import stream_events_for
from agentbus_redis.messages.content import ContentBlock, TextBlock, ToolUseBlock
from agentbus_redis.runtime.codec import entry_fields
from agentbus_redis.runtime.consumer import BatchConsumer, ConsumerConfig
from agentbus_redis.streams.names import StreamNames
from agentbus_redis.streams.topology import INGESTION_GROUP, Topology
from agentbus_redis.workers.ingestion.worker import IngestionWorker

pytestmark = pytest.mark.integration

TOPOLOGY = Topology(StreamNames(prefix="livetest:", shards=1))
SESSION = "live-session"
ONE_BY_ONE = ConsumerConfig(count=1, block_ms=20, ordered=True, transactional=True)
ALL_AT_ONCE = ConsumerConfig(count=500, block_ms=20, ordered=True, transactional=True)
FIRST_TEXT = "Let me read the README and then summarise what the project does for you."
LAST_TEXT = "Reading it now, one moment."
BLOCKS: list[ContentBlock] = [
    TextBlock(text=FIRST_TEXT),
    ToolUseBlock(id="toolu_live", name="Read", input={"file_path": "README.md"}),
    TextBlock(text=LAST_TEXT),
]


def _worker(redis: aioredis.Redis) -> IngestionWorker:
    return IngestionWorker(
        redis,
        TOPOLOGY,
        tool_deadline_ms=60_000,
        internal_key=b"k",
        max_entry_bytes=DEFAULT_MAX_INGRESS_ENTRY_BYTES,
    )


async def _ingest(redis: aioredis.Redis, payloads: list[tuple[str, IngressPayload]], config: ConsumerConfig) -> None:
    """Publish ``(idempotency key, payload)`` pairs, then let one ingestion consumer apply all of them."""
    for key, payload in payloads:
        envelope = IngressEnvelope(session_id=SESSION, idempotency_key=key, payload=payload)
        await redis.xadd(TOPOLOGY.ingress(0), entry_fields(envelope))  # type: ignore[arg-type]
    consumer = BatchConsumer(
        redis,
        stream=TOPOLOGY.ingress(0),
        group=INGESTION_GROUP,
        consumer="c1",
        handler=_worker(redis).handler_for(0, 1),
        config=config,
    )
    consumer.start()
    async with asyncio.timeout(20):
        while consumer.stats.acked < len(payloads):
            await asyncio.sleep(0.005)
    await consumer.stop()


def _reply(request_id: str) -> list[tuple[str, IngressPayload]]:
    events = stream_events_for(BLOCKS, message_id="msg_live", model="claude-test")
    return [
        (f"{request_id}:{n}", StreamEvent(request_id=request_id, event=event, execute_tools=False))
        for n, event in enumerate(events)
    ]


async def _live(redis: aioredis.Redis) -> list[LiveDelta]:
    rows: Any = await redis.xrange(TOPOLOGY.live_reply(SESSION))
    return [parse_live_delta(fields[b"data"]) for _, fields in rows]


async def test_r9_3_text_deltas_reach_the_live_stream_in_order_positioned_before_their_block_message(
    aredis: aioredis.Redis,
) -> None:
    await _ingest(aredis, [("p", UserPrompt(content="hi")), *_reply("req_1")], ONE_BY_ONE)
    live = await _live(aredis)
    texts = {0: FIRST_TEXT, 2: LAST_TEXT}
    for index, text in texts.items():
        parts = [d for d in live if d.index == index]
        assert "".join(d.text for d in parts) == text
        assert len(parts) > 1  # one entry per delta when each event is its own batch
    assert all(d.request_id == "req_1" and d.kind == "text" for d in live)
    # R9.4: each block's message is logged after its deltas: its seq is greater than their after_seq.
    rows: Any = await aredis.xrange(TOPOLOGY.session_events(SESSION))
    logged = [parse_log_entry(fields[b"data"]) for _, fields in rows]
    assistant = [e for e in logged if e.message.type == "assistant"]
    assert [d.after_seq for d in live if d.index == 0] == [1] * len([d for d in live if d.index == 0])
    assert assistant[0].seq > max(d.after_seq for d in live if d.index == 0)
    assert assistant[2].seq > max(d.after_seq for d in live if d.index == 2) >= assistant[0].seq
    ttl = await aredis.pttl(TOPOLOGY.live_reply(SESSION))
    assert 0 < ttl <= LIVE_REPLY_TTL_MS


async def test_deltas_of_one_block_in_one_batch_become_one_entry(aredis: aioredis.Redis) -> None:
    await _ingest(aredis, [("p", UserPrompt(content="hi")), *_reply("req_1")], ALL_AT_ONCE)
    live = await _live(aredis)
    assert [(d.index, d.text) for d in live] == [(0, FIRST_TEXT), (2, LAST_TEXT)]


async def test_duplicate_and_invalid_events_write_no_live_text(aredis: aioredis.Redis) -> None:
    reply = _reply("req_1")
    first_delta = next(pair for pair in reply if pair[1].event.get("type") == "content_block_delta")  # type: ignore[union-attr]
    stray = StreamEvent(
        request_id="req_stray",
        event={"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "ghost"}},
    )
    await _ingest(aredis, [("p", UserPrompt(content="hi")), *reply, first_delta, ("stray", stray)], ONE_BY_ONE)
    live = await _live(aredis)
    assert "".join(d.text for d in live if d.index == 0) == FIRST_TEXT
    assert all(d.request_id == "req_1" for d in live)  # a delta before message_start is bad input (R9.9)
