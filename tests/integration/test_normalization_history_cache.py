"""The normalizer's bounded history cache: sessions beyond ``AGENTBUS_NORMALIZER_MAX_SESSIONS`` are dropped
and rebuilt from their event stream when they come back, publishing exactly the requests a worker that
kept every history publishes (issue 4: incremental per-session history, with memory bounded)."""

from __future__ import annotations

import orjson
import pytest
import redis.asyncio as aioredis

from services.normalization.worker import NormalizationWorker
from services.runtime.codec import entry_fields
from services.runtime.entries import StreamEntry
from services.runtime.key_calls import KeyCalls
from services.runtime.streams import StreamNames
from services.runtime.topology import Topology
from shared.content import TextBlock
from shared.events import LogEntry
from shared.factories import create_assistant_message, create_user_message
from shared.messages import Message

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
