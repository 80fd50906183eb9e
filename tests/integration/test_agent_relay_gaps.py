"""A6 progress across an ingestion crash (issue 19 "SIGKILL of any worker ... loses nothing"): ingestion
relays a child's batch to its parent after committing it, so a worker killed in between loses that relay.
The child's relay cursor makes the next relay (or the sweep's check) fill the gap from the child's log, in
log order, before anything newer and before the parent's result; a relay repeated publishes nothing new.
Real Redis; the relay in-process (``subagents/relay.py``)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import orjson
import pytest
import redis.asyncio as aioredis

from agentbus_redis.agents.ids import agent_id_for, child_session_id
from agentbus_redis.bus.events import LogEntry
from agentbus_redis.messages.content import TextBlock, ToolResultBlock, ToolUseBlock
from agentbus_redis.messages.factories import create_assistant_message, create_user_message
from agentbus_redis.messages.kinds import AssistantMessage, Message, UserMessage
from agentbus_redis.runtime.codec import DATA_FIELD, entry_fields
from agentbus_redis.streams.names import StreamNames
from agentbus_redis.streams.topology import Topology
from agentbus_redis.subagents.relay import ChildRelay
from agentbus_redis.subagents.store import AgentStore
from tests.integration.child_records import child_record

pytestmark = [pytest.mark.integration]

PARENT = "relay-parent"
AGENT = agent_id_for(PARENT, "toolu_agent")
CHILD = child_session_id(PARENT, AGENT)


@pytest.fixture
async def relay(redis_url: str) -> AsyncIterator[tuple[ChildRelay, aioredis.Redis, Topology]]:
    redis = aioredis.Redis.from_url(redis_url)
    topology = Topology(StreamNames(prefix="agentbus:", shards=4))
    record = child_record(PARENT, "toolu_agent")
    await AgentStore(redis, topology).register(record)
    try:
        yield ChildRelay(redis, topology, internal_key=b"k" * 32), redis, topology
    finally:
        await redis.aclose()


async def logged(redis: aioredis.Redis, topology: Topology, messages: list[Message]) -> list[LogEntry]:
    """The child's log (its session events stream), as ingestion commits it."""
    entries = [LogEntry(session_id=CHILD, seq=seq, message=m) for seq, m in enumerate(messages, start=1)]
    for entry in entries:
        await redis.xadd(topology.session_events(CHILD), entry_fields(entry))  # type: ignore[arg-type]
    return entries


async def parent_ingress(redis: aioredis.Redis, topology: Topology) -> list[tuple[str, Any]]:
    """(idempotency key, the child message uuid a progress entry carries / the result) of the parent's ingress;
    the A6.3 task events published beside them are left out (``tests/shared/agents/test_task_events.py``)."""
    rows: Any = await redis.xrange(topology.ingress_for(PARENT))
    found = []
    for _, fields in rows:
        envelope = orjson.loads(fields[DATA_FIELD.encode()])
        payload = envelope["payload"]
        if payload["type"] == "system_message" and envelope["idempotency_key"].startswith("agent_task:"):
            continue
        if payload["type"] == "tool_progress":
            found.append(("progress", payload["message"]["data"]["message"]["uuid"]))
        else:
            found.append((payload["type"], envelope["idempotency_key"]))
    return found


def child_turn() -> tuple[UserMessage, AssistantMessage, UserMessage, AssistantMessage]:
    call = ToolUseBlock(id="toolu_child_read", name="Read", input={"file_path": "a.txt"})
    reply = create_assistant_message([call])
    reply = reply.model_copy(update={"message": reply.message.model_copy(update={"stop_reason": "tool_use"})})
    answer = create_user_message(
        [ToolResultBlock(tool_use_id=call.id, content="alpha")], source_tool_assistant_uuid=reply.uuid
    )
    final = create_assistant_message([TextBlock(text="The first word is alpha.")])
    final = final.model_copy(update={"message": final.message.model_copy(update={"stop_reason": "end_turn"})})
    return create_user_message("Look around."), reply, answer, final


async def test_a6_a_relay_lost_with_ingestion_is_filled_in_by_the_next_one_in_log_order(
    relay: tuple[ChildRelay, aioredis.Redis, Topology],
) -> None:
    child_relay, redis, topology = relay
    prompt, reply, answer, _ = child_turn()
    entries = await logged(redis, topology, [prompt, reply, answer])
    # The batches with the prompt and the reply were committed, their relay lost; the result's arrives.
    await child_relay.on_child_entries(CHILD, entries[2:])
    await child_relay.on_child_entries(CHILD, entries[2:])  # redelivered: nothing new
    assert await parent_ingress(redis, topology) == [
        ("progress", prompt.uuid),
        ("progress", reply.uuid),
        ("progress", answer.uuid),
    ]


async def test_a6_the_sweep_relays_the_missing_progress_before_it_answers_the_parent(
    relay: tuple[ChildRelay, aioredis.Redis, Topology],
) -> None:
    """Every relay of the child lost (the whole turn in batches whose ingestion worker died after the commit):
    the sweep's check finds the turn over, relays the progress, then answers."""
    child_relay, redis, topology = relay
    prompt, reply, answer, final = child_turn()
    await logged(redis, topology, [prompt, reply, answer, final])
    assert await child_relay.check(CHILD) == "completed"
    assert await parent_ingress(redis, topology) == [
        ("progress", prompt.uuid),
        ("progress", reply.uuid),
        ("progress", answer.uuid),
        ("tool_result", "agent_result:toolu_agent"),
    ]
