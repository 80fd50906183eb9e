"""Issue 18, crash safety of the model worker: two model workers (processes) compete for the request
notices; neither calls the model twice for one request, and when one is SIGKILLed mid-stream the other
takes the request over once its lease expired, tombstones the half-streamed reply and calls again once:
the transcript holds one reply."""

from __future__ import annotations

import asyncio
import json
import time
import uuid
from collections.abc import Callable

import orjson
import pytest

from agentbus_redis.messages.kinds import AssistantMessage
from agentbus_redis.streams.topology import Topology
from agentbus_redis.transcript_files.layout import session_file
from tests.integration.cluster import WorkerCluster
from tests.integration.fake_model import FakeModelProcess
from tests.integration.model_turns import (
    assert_every_tool_use_answered_once,
    live_messages,
    reply,
    text,
    text_of,
    tombstones,
    turn_ended,
    wait_for,
)

pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.timeout(300)]

LEASE_MS = 4000
"""Short, so a SIGKILLed worker's call is taken over soon; long enough that a live worker on a loaded machine
(its keep-alive late by a second or more) keeps it: two live workers call the model once per request."""


@pytest.fixture(scope="module")
def deployment(module_cluster: WorkerCluster, fake: FakeModelProcess) -> WorkerCluster:
    module_cluster.extra_env.update(
        {
            "ANTHROPIC_API_KEY": "sk-ant-test",
            "AGENTBUS_MODEL__BASE_URL": fake.base_url,
            "AGENTBUS_MODEL__SESSION_LEASE_MS": str(LEASE_MS),
            "LOG_LEVEL": "INFO",
        }
    )
    for name in ("ingestion", "normalization", "transcripts", "tools"):
        module_cluster.start(name)
    module_cluster.start("model", 2)
    module_cluster.wait_ready(timeout_s=240)
    return module_cluster


async def test_two_model_workers_call_the_model_once_per_request(
    deployment: WorkerCluster, fake: FakeModelProcess
) -> None:
    sessions = [f"pair-{uuid.uuid4().hex[:10]}" for _ in range(8)]
    for session in sessions:
        fake.script(session, [reply(text(f"answer for {session}"))])
    async with deployment.client() as client:
        for session in sessions:
            await client.send_prompt(session, "hello")
        histories = await asyncio.gather(*(wait_for(client, s, turn_ended) for s in sessions))
    for session, history in zip(sessions, histories, strict=True):
        assert len(fake.requests(session)) == 1
        replies = [m for m in live_messages(history) if isinstance(m, AssistantMessage)]
        assert [text_of(m) for m in replies] == [f"answer for {session}"]


async def test_sigkill_mid_stream_tombstones_the_partial_reply_and_calls_again_once(
    deployment: WorkerCluster, fake: FakeModelProcess
) -> None:
    session = f"crash-{uuid.uuid4().hex[:10]}"
    slow = [text(f"Block {n} of a slow reply.") for n in range(1, 8)]
    fake.script(session, [reply(*slow, chunk_delay_ms=150, chunk_chars=1000), reply(text("The whole answer."))])
    topology = Topology(deployment.names)
    async with deployment.client() as client:
        await client.send_prompt(session, "tell me slowly")
        # Block 1 is logged once block 2 stopped: the reply is half streamed.
        await wait_for(client, session, lambda h: any(isinstance(m, AssistantMessage) for m in live_messages(h)))
        record = orjson.loads(await client.redis.get(topology.model_inflight(session)) or b"{}")
        assert record["state"] == "streaming"
        pid = int(str(record["owner"]).split("-")[-2])
        (victim,) = [w for w in deployment.of("model") if w.process.pid == pid]
        deployment.kill(victim)
        history = await wait_for(client, session, turn_ended, timeout_s=90)
    requests = fake.requests(session)
    assert len(requests) == 2  # the request was retried once
    first, second = (r["headers"]["x-client-request-id"] for r in requests)
    assert first != second
    dead = tombstones(history)
    assert dead, "the half-streamed reply was not tombstoned"
    assert all(text_of(t.message).startswith("Block ") for t in dead)
    replies = [m for m in live_messages(history) if isinstance(m, AssistantMessage)]
    assert [text_of(m) for m in replies] == ["The whole answer."]  # one reply in the log
    assert_every_tool_use_answered_once(history)
    path = session_file(deployment.data_dir, deployment.cwd, session)

    def transcript_settled() -> bool:
        if not path.exists():
            return False
        lines = [json.loads(line) for line in path.read_text().splitlines()]
        return [line["uuid"] for line in lines if line.get("type") == "assistant"] == [replies[0].uuid]

    await eventually_true(transcript_settled)  # the transcript holds one reply, the tombstoned lines removed
    survivor = deployment.of("model")[0]
    assert "model_call_recovered" in survivor.log_path.read_text(errors="replace")


async def eventually_true(check: Callable[[], bool], *, timeout_s: float = 30.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not check():
        assert time.monotonic() < deadline, "condition not met in time"
        await asyncio.sleep(0.05)


STEAL_LEASE = """
redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
local last = redis.call('XREVRANGE', KEYS[2], '+', '-', 'COUNT', 1)
return last[1][1]
"""
"""Take a session's call lease (as a worker would after it expired) and say, atomically, where its ingress ended."""


async def test_a_lease_lost_mid_call_aborts_the_call_and_the_next_holder_serves_the_request(
    deployment: WorkerCluster, fake: FakeModelProcess
) -> None:
    """Issue 18 / the session lease: the worker whose lease is taken from it mid-stream closes the stream, writes
    nothing more (its writes are fenced by the lease token) and leaves the notice pending; once the lease is
    free the request is served again: the partial reply tombstoned, one reply in the log."""
    session = f"lease-{uuid.uuid4().hex[:10]}"
    slow = [text(f"Block {n} of a slow reply.") for n in range(1, 200)]  # ~30 s: the abort comes first
    fake.script(session, [reply(*slow, chunk_delay_ms=150, chunk_chars=1000), reply(text("The whole answer."))])
    topology = Topology(deployment.names)
    lease_key, ingress = topology.model_lease(session), topology.ingress_for(session)
    async with deployment.client() as client:
        await client.send_prompt(session, "tell me slowly")
        await wait_for(client, session, lambda h: any(isinstance(m, AssistantMessage) for m in live_messages(h)))
        record = orjson.loads(await client.redis.get(topology.model_inflight(session)) or b"{}")
        assert record["state"] == "streaming"
        cut_at = await client.redis.eval(STEAL_LEASE, 2, lease_key, ingress, "another-worker", 600_000)  # type: ignore[misc]

        def aborted() -> bool:
            (first,) = fake.requests(session)
            return first["ended"] == "client_left"

        await eventually_true(aborted, timeout_s=60)  # the stream was closed by the worker, not finished
        pid = int(str(record["owner"]).split("-")[-2])
        (owner,) = [w for w in deployment.of("model") if w.process.pid == pid]
        await eventually_true(lambda: "session_lease_lost" in owner.log_path.read_text(errors="replace"))
        late = await client.redis.xrange(ingress, min=f"({cut_at.decode()}", max="+")
        assert not [fields for _, fields in late if str(record["request_id"]).encode() in fields[b"data"]]
        assert len(fake.requests(session)) == 1  # nobody calls while the lease is taken

        await client.redis.delete(lease_key)  # the other holder is done: the pending notice is served again
        history = await wait_for(client, session, turn_ended, timeout_s=120)
    assert len(fake.requests(session)) == 2
    dead = tombstones(history)
    assert dead, "the partial reply was not tombstoned"
    assert all(text_of(t.message).startswith("Block ") for t in dead)
    replies = [m for m in live_messages(history) if isinstance(m, AssistantMessage)]
    assert [text_of(m) for m in replies] == ["The whole answer."]
    assert_every_tool_use_answered_once(history)
