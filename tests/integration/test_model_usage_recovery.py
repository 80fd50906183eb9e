"""M10 usage across a model-worker crash (issue 19 "SIGKILL ... loses nothing"): a worker that dies after its
reply's last event (the request answered, atomically with the in-flight record) and before it recorded the
call's usage leaves the usage in that record; the worker that takes the request notice over does not call
the model again and records the usage — once, however often the notice comes back, and not a second time
when the dead worker had recorded it after all (the usage store deduplicates by request id) — nor lost when the
session's next request came first and supersedes the notice (soak run of issue 25: the worker's usage write
failed with a ConnectionError after the reply landed; the notice came back after the next prompt). Real Redis; the
model worker's request handling in-process (no model call is made)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import orjson
import pytest
import redis.asyncio as aioredis
from anthropic import AsyncAnthropic

from agentbus_redis.bus.events import RequestReady
from agentbus_redis.config.settings import Settings
from agentbus_redis.json_types import JsonObject
from agentbus_redis.model.cost import DEFAULT_PRICES
from agentbus_redis.model.request import ModelDefaults
from agentbus_redis.runtime.codec import entry_fields
from agentbus_redis.runtime.lane_worker import ensure_groups
from agentbus_redis.runtime.slots import JobSlots
from agentbus_redis.stores.usage import read_usage, record_usage
from agentbus_redis.streams.entries import StreamEntry
from agentbus_redis.streams.topology import MODEL_GROUP, Topology
from agentbus_redis.workers.model.session_lease import SessionLeaseLost
from agentbus_redis.workers.model.worker import ModelWorker, request_digest
from tests.integration.fake_model import FakeModelProcess
from tests.integration.model_turns import reply, text

pytestmark = [pytest.mark.integration]

SESSION = "usage-recovery"
REQUEST: JsonObject = {"messages": [{"role": "user", "content": "hi"}]}
USAGE: JsonObject = {"input_tokens": 100, "output_tokens": 20}


@pytest.fixture
async def served(redis_url: str) -> AsyncIterator[tuple[aioredis.Redis, Topology, ModelWorker]]:
    settings = Settings(_env_file=None, shards=4)
    redis = aioredis.Redis.from_url(redis_url)
    topology = Topology(settings.names)

    async def no_tools() -> list[object]:
        raise AssertionError("an answered request is not called again")

    worker = ModelWorker(
        redis,
        topology,
        consumer="survivor",
        settings=settings.model,
        client=AsyncAnthropic(api_key="unused", base_url="http://127.0.0.1:9", max_retries=0),
        defaults=ModelDefaults(model=settings.model.model),
        tools=no_tools,  # type: ignore[arg-type]
        prices=DEFAULT_PRICES,
        internal_key=b"k" * 32,
        slots=JobSlots(redis, group=MODEL_GROUP, size=1),
        keepalive_s=1.0,
    )
    try:
        yield redis, topology, worker
    finally:
        await redis.aclose()


async def left_by_a_dead_worker(redis: aioredis.Redis, topology: Topology) -> tuple[StreamEntry, RequestReady]:
    """The stored request, its notice (pending), and the answered in-flight record the dead worker wrote with
    the reply's last event."""
    await redis.set(topology.request(SESSION), orjson.dumps({"session_id": SESSION, "seq": 1, "request": REQUEST}))
    inflight = {
        "request_id": "req_dead",
        "seq": 1,
        "state": "answered",
        "owner": "model-host-1-dead",
        "usage": USAGE,
        "usage_model": "claude-sonnet-4-6",
        "digest": request_digest(REQUEST),
    }
    await redis.set(topology.model_inflight(SESSION), orjson.dumps(inflight))
    notice = RequestReady(session_id=SESSION, seq=1, key=topology.request(SESSION), message_count=1)
    stream = topology.requests_for(SESSION)
    entry_id: Any = await redis.xadd(stream, entry_fields(notice))  # type: ignore[arg-type]
    return StreamEntry(stream, entry_id.decode(), entry_fields(notice), 2), notice


async def test_m10_usage_of_a_call_answered_by_a_dead_worker_is_recorded_once_by_the_survivor(
    served: tuple[aioredis.Redis, Topology, ModelWorker],
) -> None:
    redis, topology, worker = served
    entry, notice = await left_by_a_dead_worker(redis, topology)
    await worker._run(entry, notice)
    await worker._run(entry, notice)  # the notice back once more: still once
    usage = await read_usage(redis, topology, SESSION)
    assert (usage.total.requests, usage.total.input_tokens, usage.total.output_tokens) == (1, 100, 20)
    assert worker.stats.already_answered == 2
    assert worker.stats.calls == 0


async def test_m10_usage_the_dead_worker_recorded_is_not_counted_twice(
    served: tuple[aioredis.Redis, Topology, ModelWorker],
) -> None:
    redis, topology, worker = served
    entry, notice = await left_by_a_dead_worker(redis, topology)
    await record_usage(
        redis, topology, SESSION, model="claude-sonnet-4-6", usage=USAGE, cost_usd=0.0, request_id="req_dead"
    )
    await worker._run(entry, notice)
    usage = await read_usage(redis, topology, SESSION)
    assert usage.total.requests == 1


async def test_m10_usage_of_a_dead_call_is_recorded_when_the_next_request_superseded_its_notice(
    served: tuple[aioredis.Redis, Topology, ModelWorker],
) -> None:
    redis, topology, worker = served
    entry, notice = await left_by_a_dead_worker(redis, topology)
    # The reply landed, so the turn went on: the session's next request (seq 3) is stored before the dead
    # worker's notice (seq 1) comes back.
    await redis.set(topology.request(SESSION), orjson.dumps({"session_id": SESSION, "seq": 3, "request": REQUEST}))
    await worker._run(entry, notice)
    usage = await read_usage(redis, topology, SESSION)
    assert (usage.total.requests, usage.total.input_tokens, usage.total.output_tokens) == (1, 100, 20)
    assert worker.stats.superseded == 1
    assert worker.stats.calls == 0


async def test_m10_usage_of_a_reply_whose_lease_went_after_its_stop_reason_is_recorded(
    redis_url: str, fake: FakeModelProcess
) -> None:
    """Issue 25 (soak: "usage recorded 8 calls, the servers answered 9"): the session's lease is lost after the
    reply's ``message_delta`` (its usage final) and before its ``message_stop``. The call is abandoned — the
    notice is served again and the model called again — but the API billed the first reply in full, so its
    usage is recorded now."""
    settings = Settings(_env_file=None, shards=4)
    redis = aioredis.Redis.from_url(redis_url)
    topology = Topology(settings.names)
    session = "usage-lease-lost"
    # Events a second apart: the lease is taken away in the second between message_delta and message_stop.
    fake.script(session, [reply(text("hello"), chunk_delay_ms=1000, usage={"output_tokens": 7})])
    worker = ModelWorker(
        redis,
        topology,
        consumer="loser",
        settings=settings.model,
        client=AsyncAnthropic(api_key="sk-ant-test", base_url=fake.base_url, max_retries=0),
        defaults=ModelDefaults(model=settings.model.model),
        tools=no_tools,
        prices=DEFAULT_PRICES,
        internal_key=b"k" * 32,
        slots=JobSlots(redis, group=MODEL_GROUP, size=1),
        keepalive_s=0.05,
    )
    try:
        await redis.set(topology.request(session), orjson.dumps({"session_id": session, "seq": 1, "request": REQUEST}))
        notice = RequestReady(session_id=session, seq=1, key=topology.request(session), message_count=1)
        stream = topology.requests_for(session)
        await ensure_groups(redis, [(stream, MODEL_GROUP)])
        await redis.xadd(stream, entry_fields(notice))  # type: ignore[arg-type]
        ((_, [(entry_id, fields)]),) = await redis.xreadgroup(MODEL_GROUP, "loser", {stream: ">"}, count=1)
        entry = StreamEntry(stream, entry_id.decode(), fields, 1)
        call = asyncio.ensure_future(worker._run(entry, notice))
        while b'"message_delta"' not in b"".join(
            value
            for _, entry_fields_ in await redis.xrange(topology.ingress_for(session))
            for value in entry_fields_.values()
        ):
            await asyncio.sleep(0.02)
        await redis.set(topology.model_lease(session), b"another-worker")  # the lease went to another worker
        with pytest.raises(SessionLeaseLost):
            await call
        for _ in range(500):
            usage = await read_usage(redis, topology, session)
            if usage.total.requests:
                break
            await asyncio.sleep(0.02)
        assert (usage.total.requests, usage.total.output_tokens) == (1, 7)
        assert len(fake.requests(session)) == 1
    finally:
        await redis.aclose()


async def no_tools() -> list[object]:
    return []


async def published(redis: aioredis.Redis, stream: str, needle: bytes) -> bool:
    """Whether an entry of ``stream`` holds ``needle`` in one of its fields."""
    return any(needle in value for _, fields in await redis.xrange(stream) for value in fields.values())
