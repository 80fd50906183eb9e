"""Issue 15: torn-tail repair is reported. Opening a session whose file ends in a write cut by a crash
moves those bytes to ``<file>.torn`` (unchanged), and now also logs ``transcript_torn_tail`` (session,
bytes, path) and counts ``agentbus_transcript_torn_tails_total{kind}`` — in the store, and in a real
transcripts worker process (its log and its ``/metrics``). Before: nothing was logged or counted."""

from __future__ import annotations

import json
import urllib.request
from pathlib import Path

import pytest
import structlog
from prometheus_client import REGISTRY

from agentbus_redis.messages.factories import create_user_message
from agentbus_redis.observability import metrics
from agentbus_redis.transcript_files.layout import session_file
from agentbus_redis.transcript_files.lines import SessionStamp
from agentbus_redis.transcript_files.store import StoreConfig, TranscriptStore
from agentbus_redis.transcript_files.tail_recovery import TornTail, recover_torn_tail, report_torn_tail, torn_sidecar
from tests.integration.cluster import WorkerCluster, eventually
from tests.shared.transcript_builders import jsonl, user

CWD = "/agentbus"
TORN = b'{"parentUuid":"u1","type":"user","message":{"role":"user","content":"cut he'


def _torn_file(path: Path) -> int:
    """A session file whose last write was cut; returns the byte offset where the cut line starts."""
    whole = jsonl(user("u1", None, "first")).encode()
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(whole + TORN)
    return len(whole)


def _count(kind: str) -> float:
    return REGISTRY.get_sample_value("agentbus_transcript_torn_tails_total", {"kind": kind}) or 0.0


def _bytes() -> float:
    return REGISTRY.get_sample_value("agentbus_transcript_torn_tail_bytes_total") or 0.0


async def test_issue15_store_logs_and_counts_a_torn_tail_with_its_session(tmp_path: Path) -> None:
    session = "torn-session-1"
    path = session_file(tmp_path, CWD, session)
    offset = _torn_file(path)
    before, before_bytes = _count("truncated"), _bytes()
    reported: list[TornTail] = []
    store = TranscriptStore(tmp_path, StoreConfig(stamp=SessionStamp(git_branch=None)), on_torn_tail=reported.append)
    with structlog.testing.capture_logs() as logs:
        await store.record(session, [create_user_message("after restart")], cwd=CWD, continue_chain=True)
    await store.close()
    events = [entry for entry in logs if entry["event"] == "transcript_torn_tail"]
    assert events == [
        {
            "event": "transcript_torn_tail",
            "log_level": "warning",
            "session_id": session,
            "action": "truncated",
            "bytes": len(TORN),
            "offset": offset,
            "path": str(path),
            "saved_to": str(torn_sidecar(path)),
        }
    ]
    assert _count("truncated") == before + 1
    assert _bytes() == before_bytes + len(TORN)
    assert [torn.action for torn in reported] == ["truncated"]  # the constructor's callback still runs
    assert torn_sidecar(path).read_bytes() == TORN + b"\n"


def test_issue15_a_terminated_tail_is_logged_at_info_and_counted_without_bytes(tmp_path: Path) -> None:
    path = tmp_path / "s.jsonl"
    path.write_text(jsonl(user("u1", None)).rstrip("\n"))
    torn = recover_torn_tail(path)
    assert torn is not None
    before, before_bytes = _count("terminated"), _bytes()
    with structlog.testing.capture_logs() as logs:
        report_torn_tail(torn, session_id=None)
    assert [(entry["log_level"], entry["action"], entry["saved_to"]) for entry in logs] == [
        ("info", "terminated", None)
    ]
    assert _count("terminated") == before + 1
    assert _bytes() == before_bytes


def test_issue15_recording_off_counts_nothing(tmp_path: Path) -> None:
    path = tmp_path / "s.jsonl"
    path.write_bytes(TORN)
    torn = recover_torn_tail(path)
    assert torn is not None
    before = _count("truncated")
    metrics.set_recording(False)
    try:
        report_torn_tail(torn, session_id="s")
    finally:
        metrics.set_recording(True)
    assert _count("truncated") == before


def _scrape(port: int) -> str:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as reply:
        return str(reply.read().decode())


@pytest.mark.timeout(180)
async def test_issue15_transcripts_worker_process_reports_a_torn_tail(cluster: WorkerCluster) -> None:
    """A real ``agentbus worker transcripts`` opening a session file a crash left torn."""
    session = "torn-tail-worker"
    path = session_file(cluster.data_dir, cluster.cwd, session)
    _torn_file(path)
    cluster.start("ingestion")
    (worker,) = cluster.start("transcripts")
    cluster.wait_ready()
    bus = cluster.client()
    try:
        await bus.send_prompt(session, "after the crash")

        async def written() -> bool:
            return path.read_bytes().count(b"\n") >= 2

        await eventually(written, timeout_s=60)
    finally:
        await bus.close()
    assert torn_sidecar(path).read_bytes() == TORN + b"\n"
    assert 'agentbus_transcript_torn_tails_total{kind="truncated"} 1.0' in _scrape(worker.port)
    assert f"agentbus_transcript_torn_tail_bytes_total {float(len(TORN))}" in _scrape(worker.port)
    events = [
        json.loads(line)
        for line in worker.log_path.read_text().splitlines()
        if line.startswith("{") and "transcript_torn_tail" in line
    ]
    assert len(events) == 1, cluster.logs()
    assert events[0]["session_id"] == session
    assert events[0]["bytes"] == len(TORN)
    assert events[0]["path"] == str(path)
