"""Issue 16, "``replay`` says what it did", through the real ``agentbus replay`` process against real workers:
a summary of lines read, events published and lines skipped by reason; progress lines when stderr is not a
terminal; ``--wait`` returns only once every group of the session's log shard (the normalizer too) has settled
it, decided from ids (``agentbus_redis.streams.drain``)."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from pathlib import Path

import pytest

from agentbus_redis.streams.drain import stream_progress
from agentbus_redis.streams.topology import NORMALIZATION_GROUP, TRANSCRIPTS_GROUP
from tests.conftest import CORPUS_ROOT
from tests.integration.cluster import WorkerCluster

pytestmark = pytest.mark.integration

SHORT = CORPUS_ROOT / "claude-code" / "marot__spotter" / "short.jsonl"
LONG = CORPUS_ROOT / "claude-code" / "marot__spotter" / "258c7280-ae70-4798-800f-63464d01a85d.jsonl"


@pytest.fixture(scope="module")
def workers(module_cluster: WorkerCluster) -> WorkerCluster:
    for name in ("ingestion", "normalization", "transcripts"):
        module_cluster.start(name)
    module_cluster.wait_ready()
    return module_cluster


def replay(cluster: WorkerCluster, path: Path, session: str, *extra: str) -> tuple[list[str], list[str]]:
    done = subprocess.run(
        [sys.executable, "-m", "agentbus_redis.cli.main", "replay", str(path), "--session", session, *extra],
        env=cluster.env(),
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert "Traceback" not in done.stderr
    return done.stdout.splitlines(), done.stderr.splitlines()


def test_replay_of_a_file_without_parent_links_says_what_it_left_out(
    workers: WorkerCluster, tmp_path: Path, corpus_root: Path
) -> None:
    """7 messages without ``parentUuid``: only the last is on the resumed chain, and the summary says so."""
    lines = [json.loads(line) for line in SHORT.read_text(encoding="utf-8").splitlines()]
    messages = [line for line in lines if line["type"] in {"user", "assistant"}][:7]
    unlinked = tmp_path / "unlinked.jsonl"
    unlinked.write_text("".join(json.dumps({**line, "parentUuid": None}) + "\n" for line in messages))

    stdout, stderr = replay(workers, unlinked, "replay-report-unlinked")
    assert stdout[0] == "replay-report-unlinked"
    assert Path(stdout[1]).is_file()
    summary = stderr[-1]
    assert summary.startswith(f"agentbus: {unlinked}: replayed 7 line(s): ")
    assert "6 off the resumed chain" in summary
    assert any(line.startswith("agentbus: settled by ingestion: 1/1") for line in stderr)


def test_replay_wait_returns_once_every_group_settled_the_session(workers: WorkerCluster, corpus_root: Path) -> None:
    session = "replay-report-long"
    stdout, stderr = replay(workers, LONG, session, "--wait")
    summary = stderr[-1]
    assert "replayed 1863 line(s): 159 event(s) published" in summary
    for reason in ("progress", "off the resumed chain", "metadata", "dropped on resume"):
        assert reason in summary
    assert any("settled by" in line and NORMALIZATION_GROUP in line and "2/2" in line for line in stderr)

    async def settled_now() -> tuple[bool, bool]:
        async with workers.client() as bus:
            progress = await stream_progress(bus.redis, bus.topology.log_for(session))
            assert progress is not None
            return progress.drained(NORMALIZATION_GROUP), progress.drained(TRANSCRIPTS_GROUP)

    assert asyncio.run(settled_now()) == (True, True)
    assert Path(stdout[1]).is_file()
