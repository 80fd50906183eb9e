"""Issue 25, "no wait without an owner": ingestion's stuck-turn sweep (bus/stuck_turns.py) with a short
bound (2 s), against real worker processes (ingestion, normalization, tools with ``ask_policy=approve``).

- A prompt no model ever answers (no model worker: the wait lost its owner) is ended with Claude Code's
  ``Request timed out`` API error; the caller of ``converse()`` sees the turn end; the metric counts it.
- A reply that streams slowly, for several bounds in all, is progress: it is never ended.
- An approval waiting within its time, for several bounds, is not touched.
"""

from __future__ import annotations

import asyncio
import re
import urllib.request

import pytest

from agentbus_redis.messages.content import TextBlock
from agentbus_redis.messages.kinds import AssistantMessage
from agentbus_redis.model.error_texts import REQUEST_TIMED_OUT
from agentbus_redis.sdk.client import AgentbusClient
from agentbus_redis.sdk.conversation import ApiError, ConversationEvent, TextDelta, TurnEnd
from tests.integration.approval_helpers import APPROVE_ENV, counting_call, new_session, pending_for, reply_with
from tests.integration.cluster import WorkerCluster
from tests.integration.model_side import ModelSide, Reply, reply_events, request_id_of

pytestmark = [pytest.mark.integration, pytest.mark.slow]

BOUND_S = 2.0


@pytest.fixture(scope="module")
def workers(module_cluster: WorkerCluster) -> WorkerCluster:
    module_cluster.extra_env.update({**APPROVE_ENV, "AGENTBUS_STUCK_TURN_S": str(BOUND_S)})
    for name in ("ingestion", "normalization", "tools"):
        module_cluster.start(name)
    module_cluster.wait_ready()
    return module_cluster


def stuck_ended(workers: WorkerCluster, waiting_for: str) -> float:
    """``agentbus_sessions_stuck_ended_total{waiting_for=…}`` of the ingestion worker (0 before the first)."""
    (ingestion,) = workers.of("ingestion")
    with urllib.request.urlopen(f"http://127.0.0.1:{ingestion.port}/metrics", timeout=10) as reply:
        text = reply.read().decode()
    pattern = rf'^agentbus_sessions_stuck_ended_total\{{waiting_for="{waiting_for}"\}} (\S+)$'
    match = re.search(pattern, text, re.MULTILINE)
    return float(match.group(1)) if match else 0.0


def slow(text: str, *, pause_s: float) -> Reply:
    async def reply(bus: AgentbusClient, session: str) -> None:
        request_id = request_id_of(session)
        for event in reply_events([TextBlock(text=text)]):
            await bus.send_stream_event(session, request_id, event)
            await asyncio.sleep(pause_s)

    return reply


async def test_a_prompt_nobody_answers_ends_with_request_timed_out_and_is_counted(workers: WorkerCluster) -> None:
    before = await asyncio.to_thread(stuck_ended, workers, "model_reply")
    async with workers.client() as bus:
        events: list[ConversationEvent] = [
            event async for event in bus.converse("stuck-model", "is anyone there?", timeout_s=120)
        ]
        history = await bus.history("stuck-model")
    end = events[-1]
    assert isinstance(end, TurnEnd)
    assert end.error is not None
    assert REQUEST_TIMED_OUT in end.error
    assert any(isinstance(event, ApiError) for event in events)
    last = history[-1].message
    assert isinstance(last, AssistantMessage)
    assert last.is_api_error_message
    assert await asyncio.to_thread(stuck_ended, workers, "model_reply") == before + 1


async def test_a_reply_streaming_slowly_over_several_bounds_is_not_ended(workers: WorkerCluster) -> None:
    text = "Slow but alive: " + " ".join(f"w{n}" for n in range(40))
    async with workers.client() as bus:
        model = await ModelSide.start(bus, "stuck-slow", [slow(text, pause_s=BOUND_S / 3)])
        events = [event async for event in bus.converse("stuck-slow", "take your time", timeout_s=120)]
        await model
    end = events[-1]
    assert isinstance(end, TurnEnd)
    assert (end.stop_reason, end.error) == ("end_turn", None)
    assert "".join(e.text for e in events if isinstance(e, TextDelta)) == text
    assert len(reply_events([TextBlock(text=text)])) * BOUND_S / 3 > 3 * BOUND_S  # it outlived the bound thrice


async def test_an_approval_waiting_within_its_time_is_not_touched(workers: WorkerCluster) -> None:
    session = new_session()
    before = await asyncio.to_thread(stuck_ended, workers, "approval")
    async with workers.client() as bus:
        await reply_with(bus, session, counting_call("wait", "never.txt"))
        (pending,) = await pending_for(bus, session)
        await asyncio.sleep(4 * BOUND_S)  # the sweep runs every second: it saw this session several times
        still = await bus.pending_approvals(session)
        assert [p.approval_id for p in still] == [pending.approval_id]
        await pending.deny(message="not now")
    assert await asyncio.to_thread(stuck_ended, workers, "approval") == before
