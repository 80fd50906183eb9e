"""Issue 25: a reply's events reach the log complete and in order, or the call is abandoned whole — never a
gap (workers/model/publisher.py). Against a private redis-server that is stopped and started again."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import orjson
import pytest
import redis.asyncio as aioredis
from anthropic import AsyncAnthropic

from agentbus_redis.bus.events import AssistantReply, StreamEvent, StreamFallback, parse_ingress
from agentbus_redis.config.settings import ModelSettings
from agentbus_redis.json_types import JsonObject
from agentbus_redis.local.redis_server import LocalRedis, start_local_redis
from agentbus_redis.model.cost import DEFAULT_PRICES
from agentbus_redis.model.request import ModelDefaults
from agentbus_redis.runtime.slots import JobSlots
from agentbus_redis.stores.usage import read_usage
from agentbus_redis.streams.names import StreamNames
from agentbus_redis.streams.topology import Topology
from agentbus_redis.tools.definitions import ToolDefinition
from agentbus_redis.workers.model.call import CallResult, ModelCall
from agentbus_redis.workers.model.publisher import PublishFailed, SessionPublisher
from agentbus_redis.workers.model.worker import ModelWorker

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]

KEY = b"k" * 32
SESSION = "publish-faults"
TOPOLOGY = Topology(StreamNames(prefix="agentbus:", shards=4))


@pytest.fixture
def private_redis(tmp_path: Path) -> Iterator[LocalRedis]:
    server = start_local_redis(tmp_path / "redis", appendonly=True)
    try:
        yield server
    finally:
        server.stop(kill=True)


@pytest.fixture
async def redis(private_redis: LocalRedis) -> AsyncIterator[aioredis.Redis]:
    client = aioredis.Redis.from_url(private_redis.url, socket_connect_timeout=1)
    try:
        yield client
    finally:
        await client.aclose()


def publisher(redis: aioredis.Redis, *, retry_s: float) -> SessionPublisher:
    return SessionPublisher(
        redis, TOPOLOGY, session_id=SESSION, request_seq=3, internal_key=KEY, traceparent=None, retry_s=retry_s
    )


def event(index: int) -> JsonObject:
    return {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": f"part {index}"}}


async def ingress(redis: aioredis.Redis) -> list[object]:
    rows = await redis.xrange(TOPOLOGY.ingress_for(SESSION))
    return [parse_ingress(fields[b"data"]).payload for _, fields in rows or [] if fields is not None]


async def test_a_write_that_fails_while_redis_restarts_lands_whole_and_in_order(
    redis: aioredis.Redis, private_redis: LocalRedis
) -> None:
    out = publisher(redis, retry_s=60)
    out.add_event("req_1", 0, event(0))
    await out.drain()
    private_redis.stop()
    out.record({"request_id": "req_1", "seq": 3, "state": "streaming"})
    for index in range(1, 6):
        out.add_event("req_1", index, event(index))  # queued behind the failing write, none dropped
    await asyncio.sleep(0.3)
    await asyncio.to_thread(private_redis.start)
    await out.drain()
    payloads = await ingress(redis)
    assert [p.event for p in payloads if isinstance(p, StreamEvent)] == [event(i) for i in range(6)]
    assert out.write_retries >= 1
    inflight = await redis.get(TOPOLOGY.model_inflight(SESSION))
    assert inflight is not None
    assert orjson.loads(inflight)["state"] == "streaming"


async def test_a_write_that_never_lands_abandons_the_call_and_nothing_after_it_is_written(
    redis: aioredis.Redis, private_redis: LocalRedis
) -> None:
    out = publisher(redis, retry_s=0.3)
    private_redis.stop()
    out.add_event("req_1", 0, event(0))
    with pytest.raises(PublishFailed):
        await out.drain()
    await asyncio.to_thread(private_redis.start)
    with pytest.raises(PublishFailed):
        out.add_event("req_1", 1, event(1))  # never a later event without the earlier one: no gap
    with pytest.raises(PublishFailed):
        await out.publish([])
    assert await ingress(redis) == []


async def test_an_abandoned_call_on_its_last_delivery_ends_the_turn_with_the_raw_error(
    redis: aioredis.Redis,
) -> None:
    """M7.4: "An exception that escapes the model call (bug path) produces: ... an assistant error whose text
    is the raw error message (no `API Error:` prefix)". What the call streamed is tombstoned first (R6.1)."""
    out = publisher(redis, retry_s=1)
    call = ModelCall(
        AsyncAnthropic(api_key="unused", base_url="http://127.0.0.1:9", max_retries=0),
        out,
        settings=ModelSettings(),
        params={"model": "claude-sonnet-4-6", "max_tokens": 10, "messages": []},
        model="claude-sonnet-4-6",
        fallback_model=None,
        owner="test",
    )
    call.request_id = "req_7"
    error = PublishFailed(SESSION, ConnectionError("Connection closed by server."))
    await call.end_abandoned(error)
    fallback, reply = await ingress(redis)
    assert fallback == StreamFallback(request_id="req_7")
    assert isinstance(reply, AssistantReply)
    assert reply.message.is_api_error_message
    assert [block.text for block in reply.message.blocks] == [str(error)]  # type: ignore[union-attr]
    inflight = await redis.get(TOPOLOGY.model_inflight(SESSION))
    assert inflight is not None
    assert orjson.loads(inflight)["state"] == "answered"


async def no_tools() -> list[ToolDefinition]:
    return []


async def test_the_usage_of_a_reply_that_landed_is_recorded_once_redis_is_back(
    redis: aioredis.Redis, private_redis: LocalRedis
) -> None:
    """Issue 25 (a fresh clone saw a session's usage at 0 requests after its turn ended): Redis went away right
    after a reply's last event landed, before the worker recorded its usage. The record is ridden out like the
    reply's writes and lands as soon as Redis is back — not only when the notice is reclaimed (30 s later by
    default) and its next server finds the usage in the in-flight record."""
    worker = ModelWorker(
        redis,
        TOPOLOGY,
        consumer="test",
        settings=ModelSettings(publish_retry_s=60),
        client=AsyncAnthropic(api_key="unused", base_url="http://127.0.0.1:9", max_retries=0),
        defaults=ModelDefaults(model="claude-sonnet-4-6"),
        tools=no_tools,
        prices=DEFAULT_PRICES,
        internal_key=KEY,
        slots=JobSlots(redis, group="model", size=1),
        keepalive_s=1,
    )
    usage: JsonObject = {
        "input_tokens": 12,
        "output_tokens": 5,
        "cache_read_input_tokens": 0,
        "cache_creation_input_tokens": 0,
    }
    result = CallResult(outcome="ok", model="claude-sonnet-4-6", request_id="req_9", usage=usage)
    private_redis.stop()
    accounting = asyncio.create_task(worker._account(SESSION, "default", 100, result, 0.5))
    await asyncio.sleep(0.3)
    assert not accounting.done()  # waiting for Redis, not given up
    await asyncio.to_thread(private_redis.start)
    await accounting
    recorded = await read_usage(redis, TOPOLOGY, SESSION)
    assert recorded.total.requests == 1
    assert recorded.total.input_tokens == 12
    assert recorded.total.output_tokens == 5
