"""Issue 15: a tool worker refills each slot as soon as its job ends (it used to read
``max_concurrent_jobs`` jobs and read again only after the slowest had finished), acks each job when it
is done, and still dead-letters a job that keeps failing. Real Redis, a real tool worker process."""

from __future__ import annotations

import json
import time
from typing import Any

import pytest
import redis.asyncio as aioredis

from agentbus_redis.bus.events import ToolJob, ToolResultReport, parse_ingress
from agentbus_redis.messages.content import ToolResultBlock, ToolUseBlock
from agentbus_redis.runtime.codec import entry_fields
from agentbus_redis.streams.deadletter import REASON_MAX_DELIVERIES, list_dead_letters
from agentbus_redis.streams.entries import id_text
from agentbus_redis.streams.topology import TOOLS_GROUP, Topology
from tests.integration.cluster import WorkerCluster, eventually

pytestmark = [pytest.mark.integration, pytest.mark.slow]

SLOTS = 2
SHORT_JOBS = 6


@pytest.fixture(scope="module")
def tools_worker(module_cluster: WorkerCluster) -> WorkerCluster:
    """One tool worker with two slots, any Bash command allowed, and room for a long call."""
    module_cluster.extra_env.update(
        {
            "AGENTBUS_TOOLS__MAX_CONCURRENT_JOBS": str(SLOTS),
            "AGENTBUS_TOOLS__TIMEOUT_S": "120",
            "AGENTBUS_TOOLS__DEADLINE_S": "300",
            "AGENTBUS_TOOLS__ALLOW": json.dumps(["Bash"]),
        }
    )
    module_cluster.start("tools")
    module_cluster.wait_ready()
    return module_cluster


def bash_job(session: str, name: str, command: str) -> ToolJob:
    now_ms = int(time.time() * 1000)
    call = ToolUseBlock(id=f"toolu_{name}", name="Bash", input={"command": command})
    return ToolJob(
        session_id=session,
        assistant_uuid=f"assistant-{name}",
        tool_uses=[call],
        dispatched_ms=now_ms,
        deadline_ms=now_ms + 600_000,
    )


async def results_in_order(redis: aioredis.Redis, topology: Topology, session: str) -> list[tuple[str, str]]:
    """(tool_use_id, result text) of every tool result on the session's ingress stream, in stream order."""
    found: list[tuple[str, str]] = []
    for _, fields in await redis.xrange(topology.ingress_for(session)):
        envelope = parse_ingress(fields[b"data"])
        payload: Any = envelope.payload
        if envelope.session_id == session and isinstance(payload, ToolResultReport):
            for block in payload.message.message.content:
                if isinstance(block, ToolResultBlock):
                    found.append((block.tool_use_id, str(block.content)))
    return found


async def pending_jobs(redis: aioredis.Redis, topology: Topology) -> int:
    total = 0
    for stream in topology.tool_job_streams():
        summary: Any = await redis.xpending(stream, TOOLS_GROUP)
        total += int(summary["pending"])
    return total


async def test_short_jobs_complete_while_a_long_one_holds_a_slot(tools_worker: WorkerCluster) -> None:
    """With 2 slots, one long call and six short ones: the six run one after another in the free slot
    and are answered (and acked) while the long call still runs; the long one is answered last."""
    topology = Topology(tools_worker.names)
    session = "slots-refill"
    release = tools_worker.workspace / "release-long-job"
    async with aioredis.Redis.from_url(tools_worker.redis_url) as redis:
        # The long call ends when the test says so (or after ~2 minutes, should the test die first): the
        # order of completions is all that is measured.
        wait_for_release = f"for _ in $(seq 2400); do [ -e {release} ] && break; sleep 0.05; done; echo long done"
        long_job = bash_job(session, "long", wait_for_release)
        await redis.xadd(topology.tool_jobs_for(session), entry_fields(long_job))  # type: ignore[arg-type]
        for index in range(SHORT_JOBS):
            short = bash_job(session, f"short{index}", f"echo short {index}")
            await redis.xadd(topology.tool_jobs_for(session), entry_fields(short))  # type: ignore[arg-type]
        short_ids = {f"toolu_short{index}" for index in range(SHORT_JOBS)}

        async def shorts_answered() -> bool:
            return short_ids <= {tool_use_id for tool_use_id, _ in await results_in_order(redis, topology, session)}

        await eventually(shorts_answered, timeout_s=60)

        # Each short job is acked as it ends: only the long one stays pending. A job writes its result before its
        # entry is acked (at-least-once, slots.py), so the last short's ack may still be on its way when its result
        # is seen (the later on a busy machine): awaited, not assumed. The long job still holds its slot throughout
        # (it ends only when released below), so only the shorts can have been acked.
        async def only_the_long_one_pending() -> bool:
            return await pending_jobs(redis, topology) == 1

        await eventually(only_the_long_one_pending, timeout_s=60)
        answered = await results_in_order(redis, topology, session)
        assert "toolu_long" not in {tool_use_id for tool_use_id, _ in answered}, tools_worker.logs()

        release.touch()

        async def long_answered() -> bool:
            return len(await results_in_order(redis, topology, session)) == SHORT_JOBS + 1

        await eventually(long_answered, timeout_s=60)
        answered = await results_in_order(redis, topology, session)
        assert answered[-1] == ("toolu_long", "long done")
        assert sorted(answered[:-1]) == sorted((f"toolu_short{i}", f"short {i}") for i in range(SHORT_JOBS))

        async def all_acked() -> bool:
            return await pending_jobs(redis, topology) == 0

        await eventually(all_acked, timeout_s=30)


async def test_a_job_that_keeps_failing_is_dead_lettered(tools_worker: WorkerCluster) -> None:
    """A job whose run fails every time (its session's answered-set key has the wrong type) is reclaimed
    and retried until it was delivered more than ``max_deliveries`` times, then dead-lettered."""
    topology = Topology(tools_worker.names)
    session = "slots-failing"
    async with aioredis.Redis.from_url(tools_worker.redis_url) as redis:
        await redis.set(topology.answered(session), "not a set")
        entry_id = id_text(
            await redis.xadd(topology.tool_jobs_for(session), entry_fields(bash_job(session, "fails", "echo never")))
        )  # type: ignore[arg-type]

        async def dead_lettered() -> bool:
            letters = await list_dead_letters(redis, topology.names.dead_letter_stream(topology.tool_jobs_for(session)))
            return any(letter.entry_id == entry_id for letter in letters)

        await eventually(dead_lettered, timeout_s=60)
        letters = await list_dead_letters(redis, topology.names.dead_letter_stream(topology.tool_jobs_for(session)))
        [letter] = [letter for letter in letters if letter.entry_id == entry_id]
        assert letter.reason == REASON_MAX_DELIVERIES
        assert await pending_jobs(redis, topology) == 0
        assert await results_in_order(redis, topology, session) == []
