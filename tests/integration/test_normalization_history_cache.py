"""The normalizer's bounded history cache: sessions beyond ``AGENTBUS_NORMALIZER_MAX_SESSIONS`` are dropped
and rebuilt from their event stream when they come back, publishing exactly the requests a worker that
kept every history publishes (issue 4: incremental per-session history, with memory bounded)."""

from __future__ import annotations

import orjson
import pytest
import redis.asyncio as aioredis

from agentbus_redis.bus.events import LogEntry
from agentbus_redis.messages.content import TextBlock, ToolResultBlock, ToolUseBlock
from agentbus_redis.messages.factories import create_assistant_message, create_user_message
from agentbus_redis.messages.kinds import Message
from agentbus_redis.runtime.codec import entry_fields
from agentbus_redis.runtime.key_calls import KeyCalls
from agentbus_redis.streams.entries import StreamEntry
from agentbus_redis.streams.names import StreamNames
from agentbus_redis.streams.topology import Topology
from agentbus_redis.workers.normalization.worker import NormalizationWorker

pytestmark = pytest.mark.integration

TOPOLOGY = Topology(StreamNames(prefix="histcache:", shards=2))


def conversation() -> list[tuple[str, Message]]:
    """Two sessions taking turns: every prompt makes a request (R4 pipeline over the history)."""
    turns: list[tuple[str, Message]] = []
    for turn in range(3):
        for session in ("session-a", "session-b"):
            turns.append((session, create_user_message(f"{session}: question {turn}")))
            turns.append((session, create_assistant_message([TextBlock(text=f"{session}: answer {turn}")])))
    return turns


async def run(aredis: aioredis.Redis, worker: NormalizationWorker) -> list[tuple[str, object]]:
    """Feed the log to ``worker`` one entry per batch (as the session's own stream holds it); return every
    request it published, in order."""
    published: list[tuple[str, object]] = []
    seqs: dict[str, int] = {}
    for session, message in conversation():
        seqs[session] = seqs.get(session, 0) + 1
        record = LogEntry(session_id=session, seq=seqs[session], message=message)
        fields = entry_fields(record)
        await aredis.xadd(TOPOLOGY.session_events(session), fields)  # ingestion writes both copies
        entry_id = (await aredis.xadd(TOPOLOGY.log_for(session), fields)).decode()
        outcome = await worker.handle([StreamEntry(TOPOLOGY.log_for(session), entry_id, fields)])
        if outcome.write is not None:
            calls = KeyCalls()
            outcome.write(calls)
            await calls.write(aredis)
        if outcome.outputs:
            body = orjson.loads(await aredis.get(TOPOLOGY.request(session)))
            published.append((session, body["request"]))
    return published


async def test_evicted_sessions_are_rebuilt_and_publish_the_same_requests(aredis: aioredis.Redis) -> None:
    unbounded = NormalizationWorker(aredis, TOPOLOGY, max_sessions=100)
    expected = await run(aredis, unbounded)
    await aredis.flushdb()
    bounded = NormalizationWorker(aredis, TOPOLOGY, max_sessions=1)
    assert await run(aredis, bounded) == expected
    assert len(expected) == 6  # one request per prompt
    assert len(bounded.histories) == 1
    assert bounded.stats.evicted >= 5  # every switch of session dropped the other one
    assert unbounded.stats.evicted == 0


async def test_a_history_that_missed_an_entry_is_rebuilt_before_it_decides(aredis: aioredis.Redis) -> None:
    """Per-session sequence check (ecosystem.md §5): a log entry whose ``seq`` is not the next one of the
    cached history means the normalizer did not see an entry of the session — the history is rebuilt from
    the session's event stream before deciding, so a turn split over several lines (R9.4) is not taken
    as answered after the first of its calls (the published request would answer one call of two)."""
    worker = NormalizationWorker(aredis, TOPOLOGY, max_sessions=100)
    session = "session-gap"
    calls = [ToolUseBlock(id=f"toolu_{n}", name="Bash", input={"command": "true"}) for n in (1, 2)]
    split_reply = [create_assistant_message([call]) for call in calls]
    split_reply = [m.model_copy(update={"message": m.message.model_copy(update={"id": "msg_1"})}) for m in split_reply]
    results = [
        create_user_message([ToolResultBlock(tool_use_id=call.id, content="ok")], source_tool_assistant_uuid=m.uuid)
        for call, m in zip(calls, split_reply, strict=True)
    ]
    log = [create_user_message("run both"), *split_reply, *results]
    published: list[int] = []
    for seq, message in enumerate(log, start=1):
        fields = entry_fields(LogEntry(session_id=session, seq=seq, message=message))
        await aredis.xadd(TOPOLOGY.session_events(session), fields)
        entry_id = (await aredis.xadd(TOPOLOGY.log_for(session), fields)).decode()
        if seq == 3:
            continue  # this worker never sees the second call's line (e.g. it was read by a stale owner)
        outcome = await worker.handle([StreamEntry(TOPOLOGY.log_for(session), entry_id, fields)])
        if outcome.outputs:
            published.append(seq)
    assert published == [1, 5]  # the prompt, then both results — not after the first result alone
    assert [m.uuid for m in worker.histories[session].history.messages] == [m.uuid for m in log]
