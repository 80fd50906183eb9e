"""Issue 18: the model worker runs as its own least-privilege Redis user (deploy/redis/users.acl ``model``),
as compose and k8s run it: a turn with a tool call, a rate-limited tenant, usage recorded and an interrupt all
work with nothing but that user's keys, commands and channel."""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import orjson
import pytest

from agentbus_redis.stores.usage import usage_from_hash
from tests.integration.fake_model import FakeModelProcess, start_fake_model
from tests.integration.model_turns import (
    assert_every_tool_use_answered_once,
    calls_settled,
    live_messages,
    reply,
    text,
    text_of,
    tool_use,
    turn_ended,
    wait_for,
)
from tests.integration.test_ingress_door import AclCluster
from tests.services.acl_redis import start_acl_redis

pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.timeout(300)]


@pytest.fixture
def fake(tmp_path: Path) -> Iterator[FakeModelProcess]:
    server = start_fake_model(tmp_path / "fake.log")
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def acl_deployment(tmp_path: Path, fake: FakeModelProcess) -> Iterator[AclCluster]:
    server = start_acl_redis(tmp_path / "redis")
    cluster = AclCluster(redis_url=server.url("operator"), root=tmp_path)
    cluster.acl = server
    cluster.extra_env.update(
        {
            "ANTHROPIC_API_KEY": "sk-ant-test",
            "AGENTBUS_MODEL__BASE_URL": fake.base_url,
            "AGENTBUS_RATE_LIMIT__REQUESTS_PER_MIN": "600",
            "AGENTBUS_RATE_LIMIT__TOKENS_PER_MIN": "10000000",
        }
    )
    try:
        for name in ("ingestion", "normalization", "transcripts", "tools", "model"):
            cluster.start(name)
        cluster.wait_ready(timeout_s=240)
        (cluster.workspace / "README.md").write_text("# acl\n", encoding="utf-8")
        yield cluster
    finally:
        cluster.stop()
        server.stop()


async def test_the_model_worker_runs_a_turn_as_the_model_acl_user(
    acl_deployment: AclCluster, fake: FakeModelProcess
) -> None:
    session = f"acl-{uuid.uuid4().hex[:10]}"
    fake.script(
        session,
        [
            reply(text("Reading."), tool_use("toolu_acl", "Read", file_path="README.md")),
            reply(text("It is a README."), usage={"input_tokens": 120, "output_tokens": 9}),
            reply(text("Slow " * 40), chunk_delay_ms=200),
        ],
    )
    producer = acl_deployment.producer()
    operator = acl_deployment.operator()
    try:
        await producer.send_prompt(session, "What is here?")
        history = await wait_for(producer, session, turn_ended)
        assert_every_tool_use_answered_once(history)
        assert text_of(live_messages(history)[-1]) == "It is a README."
        await calls_settled(operator, producer.topology, session)  # the last call's usage lands just after its reply
        raw = await operator.hgetall(producer.topology.usage(session))
        usage = usage_from_hash(session, raw)
        assert usage.total.requests == 2  # both calls recorded (M10), by the model user
        # An interrupt reaches the model worker over the interrupts channel it may subscribe to.
        await producer.send_prompt(session, "Tell me slowly.")
        inflight = producer.topology.model_inflight(session)
        await wait_for(producer, session, lambda h: len(h) > len(history))
        deadline = time.monotonic() + 60
        while orjson.loads(await operator.get(inflight) or b"{}").get("seq", 0) <= len(history):
            assert time.monotonic() < deadline, "the second call never started streaming"
            await asyncio.sleep(0.01)
        await producer.interrupt(session)
        final = await wait_for(producer, session, turn_ended)
        assert text_of(live_messages(final)[-1]) == "[Request interrupted by user]"
    finally:
        await producer.close()
        await operator.aclose()
    assert acl_deployment.alive(), acl_deployment.logs()[-4000:]
    assert "NOPERM" not in acl_deployment.logs()
