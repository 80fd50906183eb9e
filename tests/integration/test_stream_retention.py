"""Retention in the running pipeline (ecosystem.md P6): with nothing kept after acknowledgement
(``AGENTBUS_RETENTION__KEEP_ACKED_S=0``, a pass every 0.2 s) the workers trim ingress, log and tool-job
streams while recorded sessions flow through them, and nothing is lost: each session persists and
normalizes exactly like its original file, its own event stream keeps every entry, every group's lag
stays known."""

from __future__ import annotations

import pytest

from agentbus_redis.config.settings import Settings
from agentbus_redis.sdk.replay import replay_transcript
from agentbus_redis.transcript_files.api_view import api_view_of_transcript
from agentbus_redis.workers.retention import work_streams
from tests.integration.cluster import WorkerCluster, eventually
from tests.shared.generated_sessions import GENERATED_SESSIONS

pytestmark = [pytest.mark.integration, pytest.mark.slow]

SESSIONS = ["tool-rounds", "chat", "long"]


@pytest.mark.timeout(180)
async def test_work_streams_trimmed_while_sessions_flow_and_nothing_lost(cluster: WorkerCluster) -> None:
    cluster.extra_env.update({"AGENTBUS_RETENTION__KEEP_ACKED_S": "0", "AGENTBUS_RETENTION__INTERVAL_S": "0.2"})
    cluster.start_all(instances=1)
    settings = Settings(
        redis_url=cluster.redis_url, data_dir=cluster.data_dir, shards=cluster.names.shards, cwd=cluster.cwd
    )
    async with cluster.client() as bus:
        for name in SESSIONS:
            original = GENERATED_SESSIONS[name]()
            session = f"retention-{name}"
            report = await replay_transcript(bus, original, session_id=session, settings=settings, timeout_s=60)
            persisted = report.transcript
            replayed = api_view_of_transcript(persisted.read_bytes(), prompt="continue").request["messages"]
            assert replayed == api_view_of_transcript(original, prompt="continue").request["messages"], name
            history = await bus.history(session)
            assert [entry.seq for entry in history] == list(range(1, len(history) + 1)), session

        targets = work_streams(bus.topology)

        async def emptied() -> bool:
            return sum([await bus.redis.xlen(target.stream) for target in targets]) == 0

        await eventually(emptied, timeout_s=30)
        for target in targets:
            for row in await bus.redis.xinfo_groups(target.stream):
                assert row["lag"] == 0, (target.stream, row)
