"""Issue 15, head-of-line blame, with real worker processes: five sessions whose transcripts cannot be written,
then a healthy session, all on one log shard and in one batch of the transcripts worker. Each of the five is
dead-lettered once with the store's own error (``handler_failed``); the healthy session's transcript is
written, nothing of it is dead-lettered, and the worker never exits.

A session "fails the transcripts worker" here because a directory sits where its transcript file goes: the
store's open raises for that session alone, on every attempt, whatever the session id looks like.
"""

from __future__ import annotations

import uuid

import pytest

from agentbus_redis.streams.deadletter import REASON_HANDLER_FAILED, list_dead_letters
from agentbus_redis.streams.topology import TRANSCRIPTS_GROUP, Topology
from agentbus_redis.transcript_files.layout import session_file
from tests.integration.cluster import WorkerCluster, eventually

pytestmark = [pytest.mark.integration, pytest.mark.slow]

BAD_SESSIONS = 5


def sessions_on_shard(cluster: WorkerCluster, shard: int, count: int) -> list[str]:
    found: list[str] = []
    while len(found) < count:
        session = f"blame-{uuid.uuid4()}"
        if cluster.names.shard_of(session) == shard:
            found.append(session)
    return found


async def test_failing_sessions_do_not_blame_the_healthy_one_behind_them(cluster: WorkerCluster) -> None:
    *bad, good = sessions_on_shard(cluster, 0, BAD_SESSIONS + 1)
    cwd = cluster.cwd
    for session in bad:
        session_file(cluster.data_dir, cwd, session).mkdir(parents=True)
    log_stream = Topology(cluster.names).log(0)
    cluster.start("ingestion")
    cluster.wait_ready()
    async with cluster.client() as client:
        for session in [*bad, good]:
            await client.send_prompt(session, f"hello from {session}")

        async def logged() -> bool:
            return int(await client.redis.xlen(log_stream)) >= BAD_SESSIONS + 1

        await eventually(logged)
        # Only now the transcripts worker starts: the six entries reach it in one batch.
        (transcripts,) = cluster.start("transcripts")
        cluster.wait_ready()
        transcript = session_file(cluster.data_dir, cwd, good)

        async def settled() -> bool:
            # The healthy entry is acked after its line is written: wait for the ack too, not just the file.
            letters = await list_dead_letters(client.redis, log_stream + ":dlq")
            pending = await client.redis.xpending(log_stream, TRANSCRIPTS_GROUP)
            return transcript.is_file() and len(letters) >= BAD_SESSIONS and pending["pending"] == 0

        await eventually(settled, timeout_s=60)
        letters = await list_dead_letters(client.redis, log_stream + ":dlq")
        pending = await client.redis.xpending(log_stream, TRANSCRIPTS_GROUP)

    assert transcripts.process.poll() is None, cluster.logs()
    assert f"hello from {good}" in transcript.read_text()
    assert [letter.group for letter in letters] == [TRANSCRIPTS_GROUP] * BAD_SESSIONS
    assert [letter.reason for letter in letters] == [REASON_HANDLER_FAILED] * BAD_SESSIONS
    assert all(letter.detail.startswith("IsADirectoryError: ") for letter in letters), letters
    dead_sessions = [letter.fields["data"] for letter in letters]
    assert all(session.encode() in data for session, data in zip(bad, dead_sessions, strict=True))
    assert pending["pending"] == 0
