"""Issue 25, "clients ride out restarts": ``converse()`` across a private Redis SIGKILLed and restarted (AOF on)
several times, a publish during an outage, a bounded one beyond it, and the Agent tool's launch across a blip —
against real worker processes (ingestion, normalization); the model's side played through the SDK.

Every conversation completes with no ``ConnectionError`` reaching the caller and with its text exactly once
(no delta repeated or skipped); a publish sent while Redis is down lands once when it returns; past the
client's bound one :class:`RedisUnavailable`.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Iterator

import pytest

from agentbus_redis.agents.ids import agent_id_for, child_session_id
from agentbus_redis.agents.tool import AgentInput
from agentbus_redis.bus.events import ToolJob, UserPrompt
from agentbus_redis.config.settings import Settings
from agentbus_redis.local.redis_server import LocalRedis, start_local_redis
from agentbus_redis.messages.content import TextBlock
from agentbus_redis.messages.kinds import UserMessage
from agentbus_redis.permissions.decide import PermissionContext
from agentbus_redis.runtime import redis_client
from agentbus_redis.runtime.ride_out import RedisUnavailable
from agentbus_redis.sdk.client import AgentbusClient
from agentbus_redis.sdk.conversation import ConversationEvent, TextDelta, TurnEnd
from agentbus_redis.streams.topology import Topology
from agentbus_redis.subagents.launcher import CURRENT_AGENT_JOB, AgentJob, AgentTool
from agentbus_redis.subagents.setup import agent_setup
from agentbus_redis.subagents.store import AgentStore
from agentbus_redis.tools.tool import ToolContext, ToolOutput
from tests.integration.cluster import WorkerCluster, eventually
from tests.integration.model_side import ModelSide, Reply, reply_events, request_id_of

pytestmark = [pytest.mark.integration, pytest.mark.slow]

CONVERSATIONS = 12
TURNS = 2
RESTARTS = 3


@pytest.fixture(scope="module")
def aof_redis(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalRedis]:
    """A private Redis on its own port, append-only, for this module to kill and restart."""
    server = start_local_redis(tmp_path_factory.mktemp("redis"), appendonly=True)
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="module")
def workers(aof_redis: LocalRedis, tmp_path_factory: pytest.TempPathFactory) -> Iterator[WorkerCluster]:
    cluster = WorkerCluster(redis_url=aof_redis.url, root=tmp_path_factory.mktemp("workers"))
    try:
        cluster.start("ingestion")
        cluster.start("normalization")
        cluster.wait_ready()
        yield cluster
    finally:
        cluster.stop()


@contextlib.asynccontextmanager
async def client(workers: WorkerCluster, *, ride_out_s: float = 120.0) -> AsyncIterator[AgentbusClient]:
    bus = workers.client()
    bus.ride_out_s = ride_out_s
    async with bus:
        yield bus


async def kill_and_restart(server: LocalRedis, *, down_s: float = 0.3) -> None:
    server.stop(kill=True)
    await asyncio.sleep(down_s)
    await asyncio.to_thread(server.start)


def paced(text: str, *, pause_s: float) -> Reply:
    """A streamed reply whose events go out ``pause_s`` apart (so restarts fall inside replies)."""

    async def reply(bus: AgentbusClient, session: str) -> None:
        request_id = request_id_of(session)
        for event in reply_events([TextBlock(text=text)]):
            await bus.send_stream_event(session, request_id, event)
            await asyncio.sleep(pause_s)

    return reply


def reply_text(session: str, turn: int) -> str:
    return f"Reply {turn} of {session}: " + " ".join(f"word{n}" for n in range(30)) + "."


async def converse_turns(bus: AgentbusClient, session: str) -> list[list[ConversationEvent]]:
    turns = []
    for turn in range(TURNS):
        model = await ModelSide.start(bus, session, [paced(reply_text(session, turn), pause_s=0.05)])
        turns.append([event async for event in bus.converse(session, f"prompt {turn}", timeout_s=120)])
        await model
    return turns


@pytest.mark.timeout(400)
async def test_conversations_complete_across_redis_restarts(workers: WorkerCluster, aof_redis: LocalRedis) -> None:
    """Redis SIGKILLed and restarted on the same port and AOF three times while a dozen sessions converse: every
    turn ends at end_turn, its text exactly once; no exception reaches the caller."""
    async with client(workers) as bus:
        sessions = [f"ride-restart-{n}" for n in range(CONVERSATIONS)]
        talks = [asyncio.ensure_future(converse_turns(bus, session)) for session in sessions]
        for _ in range(RESTARTS):
            await asyncio.sleep(0.8)
            await kill_and_restart(aof_redis)
        results = await asyncio.gather(*talks, return_exceptions=True)
    failures = [result for result in results if isinstance(result, BaseException)]
    assert not failures, f"{len(failures)} of {CONVERSATIONS} conversations failed: {failures[:3]!r}"
    for session, turns in zip(sessions, results, strict=True):
        assert isinstance(turns, list)
        for turn, events in enumerate(turns):
            ends = [event for event in events if isinstance(event, TurnEnd)]
            assert len(ends) == 1, (session, turn, events[-3:])
            assert ends[0].stop_reason == "end_turn", (session, turn, ends[0])
            text = "".join(event.text for event in events if isinstance(event, TextDelta))
            assert text == reply_text(session, turn), (session, turn)


async def test_a_publish_during_an_outage_lands_once_when_redis_returns(
    workers: WorkerCluster, aof_redis: LocalRedis
) -> None:
    session = "ride-outage-publish"
    async with client(workers) as bus:
        await bus.history(session)  # connected before the outage
        aof_redis.stop(kill=True)
        sending = asyncio.ensure_future(bus.publish(session, UserPrompt(content="sent while down", uuid="u-down")))
        await asyncio.sleep(0.5)
        assert not sending.done()
        await asyncio.to_thread(aof_redis.start)
        await sending

        async def logged() -> bool:
            return any(entry.message.uuid == "u-down" for entry in await bus.history(session))  # type: ignore[union-attr]

        await eventually(logged, timeout_s=60)
        # Another publish follows it: by then ingestion has seen everything before it.
        await bus.publish(session, UserPrompt(content="after", uuid="u-after"))

        async def after_logged() -> bool:
            return any(entry.message.uuid == "u-after" for entry in await bus.history(session))  # type: ignore[union-attr]

        await eventually(after_logged, timeout_s=60)
        prompts = [entry.message.uuid for entry in await bus.history(session)]  # type: ignore[union-attr]
    assert prompts.count("u-down") == 1


async def test_a_publish_beyond_the_bound_is_one_typed_error(workers: WorkerCluster, aof_redis: LocalRedis) -> None:
    async with client(workers, ride_out_s=0.5) as bus:
        await bus.history("ride-bound")
        aof_redis.stop(kill=True)
        try:
            with pytest.raises(RedisUnavailable) as unavailable:
                await bus.publish("ride-bound", UserPrompt(content="never"), idempotency_key="k-bound")
        finally:
            await asyncio.to_thread(aof_redis.start)
    assert "k-bound" in str(unavailable.value)
    assert unavailable.value.bound_s == 0.5


@pytest.mark.timeout(200)
async def test_an_agent_launch_across_a_redis_blip_starts_one_child_and_it_runs(
    workers: WorkerCluster, aof_redis: LocalRedis
) -> None:
    """The Agent tool's launch meets a Redis that is down (SIGKILL) and back 0.5 s later: the launch is retried
    whole, one child is registered and its prompt reaches its log (ingestion ran it; the normalizer asked the
    model for it)."""
    topology = Topology(workers.names)
    redis = redis_client.worker_redis(aof_redis.url)
    settings = Settings(_env_file=None)

    async def no_tools() -> list[str]:
        return []

    tool = AgentTool(
        redis,
        topology,
        setup=agent_setup(settings.agents, cwd=str(workers.workspace)),
        permissions=PermissionContext(workspace_root=str(workers.workspace)),
        internal_key=workers.internal_key.encode(),
        tool_names=no_tools,
    )
    parent = "ride-agent-parent"
    tool_use_id = "toolu_ride_agent"
    job = ToolJob(
        session_id=parent,
        assistant_uuid="a-parent",
        tool_uses=[],
        dispatched_ms=0,
        deadline_ms=2**62,
    )
    CURRENT_AGENT_JOB.set(AgentJob(job))
    child = child_session_id(parent, agent_id_for(parent, tool_use_id))
    try:
        await redis.ping()
        aof_redis.stop(kill=True)

        async def launch() -> list[object]:
            call = AgentInput(description="look around", prompt="list the files", subagent_type="general-purpose")
            return [item async for item in tool.call(call, ToolContext(tool_use_id=tool_use_id))]

        launching = asyncio.ensure_future(launch())
        await asyncio.sleep(0.5)
        assert not launching.done()
        await asyncio.to_thread(aof_redis.start)
        outputs = await launching
        assert [type(item) for item in outputs] == [ToolOutput]

        store = AgentStore(redis, topology)
        record = await store.record(child)
        assert record is not None
        assert await redis.scard(store.keys.running_children(parent)) == 1
        async with client(workers) as bus:

            async def child_ran() -> bool:
                request = await bus.latest_request(child)
                return request is not None

            await eventually(child_ran, timeout_s=60)
            history = await bus.history(child)
        prompts = [e.message for e in history if isinstance(e.message, UserMessage)]
        assert [p.message.content for p in prompts] == ["list the files"]
    finally:
        await redis.aclose()
