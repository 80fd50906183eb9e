"""Issue 15, session ids are checked at every entry point: the SDK raises before sending, the CLI exits
2 with a usage error, and no path (lock file, transcript) is ever built from an unchecked id — not even
by a store handed one directly (defense in depth)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import redis.asyncio as aioredis
from typer.testing import CliRunner

from agentbus_redis.bus.events import LogEntry
from agentbus_redis.bus.ingress_limits import IngressEntryTooLarge
from agentbus_redis.cli.main import app
from agentbus_redis.messages.factories import create_user_message
from agentbus_redis.runtime.codec import entry_fields
from agentbus_redis.sdk.client import AgentbusClient
from agentbus_redis.session_ids import InvalidSessionId
from agentbus_redis.streams.entries import StreamEntry
from agentbus_redis.streams.names import StreamNames
from agentbus_redis.streams.topology import Topology
from agentbus_redis.transcript_files.layout import session_file, subagent_dir
from agentbus_redis.transcript_files.lines import SessionStamp
from agentbus_redis.transcript_files.session_lock import SessionLock, session_lock_path
from agentbus_redis.transcript_files.store import StoreConfig, TranscriptStore
from agentbus_redis.workers.transcripts.worker import TranscriptWorker

BAD_IDS = ["../../escape-test", "..", ".", "a/b", "line\nbreak", "esc\x1b[0m", "x" * 300]
TOPOLOGY = Topology(StreamNames(prefix="doorsdk:", shards=2))
runner = CliRunner()


async def _total_ingress(redis: aioredis.Redis) -> int:
    return sum([await redis.xlen(TOPOLOGY.ingress(shard)) for shard in range(TOPOLOGY.shards)])


@pytest.mark.parametrize("session_id", BAD_IDS)
async def test_sdk_refuses_a_bad_session_id_before_sending(aredis: aioredis.Redis, session_id: str) -> None:
    bus = AgentbusClient(aredis, TOPOLOGY)
    with pytest.raises(InvalidSessionId):
        await bus.send_prompt(session_id, "hi")
    with pytest.raises(InvalidSessionId):
        await bus.publish_many(session_id, [])
    assert await _total_ingress(aredis) == 0


async def test_sdk_refuses_an_entry_over_the_size_limit_before_sending(aredis: aioredis.Redis) -> None:
    bus = AgentbusClient(aredis, TOPOLOGY, max_entry_bytes=4096)
    with pytest.raises(IngressEntryTooLarge) as caught:
        await bus.send_prompt("door-big", "x" * 5000)
    assert caught.value.limit == 4096
    assert caught.value.size > 5000
    assert await _total_ingress(aredis) == 0
    await bus.send_prompt("door-big", "x" * 1000)
    assert await _total_ingress(aredis) == 1


@pytest.mark.parametrize(
    "args",
    [
        ["send", "../../escape-test", "hi"],
        ["send", "a/b", "hi"],
        ["tail", ".."],
        ["replay", "missing.jsonl", "--session", "../x"],
    ],
)
def test_cli_exits_2_on_a_bad_session_id(args: list[str]) -> None:
    result = runner.invoke(app, args)
    assert result.exit_code == 2, result.output
    assert "invalid session id" in result.output


@pytest.mark.parametrize("session_id", BAD_IDS)
def test_no_path_is_built_from_a_bad_session_id(tmp_path: Path, session_id: str) -> None:
    root = tmp_path / "data"
    with pytest.raises(InvalidSessionId):
        session_lock_path(root, session_id)
    with pytest.raises(InvalidSessionId):
        SessionLock.acquire(root, session_id, timeout_s=0)
    with pytest.raises(InvalidSessionId):
        session_file(root, "/agentbus", session_id)
    with pytest.raises(InvalidSessionId):
        subagent_dir(root, "/agentbus", session_id)
    assert list(tmp_path.rglob("*")) == []


async def test_the_store_creates_no_lock_outside_the_data_dir(tmp_path: Path) -> None:
    """The transcripts worker used to create ``<data>/.agentbus-locks/../../escape-test.lock`` (outside
    the data dir) before refusing the id."""
    root = tmp_path / "data"
    store = TranscriptStore(root, StoreConfig(stamp=SessionStamp(entrypoint="cli", git_branch=None)))
    with pytest.raises(InvalidSessionId):
        await store.record("../../escape-test", [create_user_message("hi")], cwd="/agentbus", continue_chain=True)
    await store.close()
    assert [path for path in tmp_path.rglob("*") if root not in path.parents and path != root] == []
    assert not (tmp_path / "escape-test.lock").exists()


async def test_the_transcripts_worker_dead_letters_a_logged_bad_id_and_writes_the_rest(tmp_path: Path) -> None:
    """A log written before ingestion checked ids must not fail the transcripts batch forever."""
    root = tmp_path / "data"
    store = TranscriptStore(root, StoreConfig(stamp=SessionStamp(entrypoint="cli", git_branch=None)))
    worker = TranscriptWorker(store, cwd="/agentbus")
    good = create_user_message("fine")
    entries = [
        StreamEntry("agentbus:{s00}:log", f"1-{index}", entry_fields(LogEntry(session_id=session, seq=1, message=m)), 1)
        for index, (session, m) in enumerate([("../../escape-test", create_user_message("bad")), ("door-ok", good)])
    ]
    outcome = await worker.handle(entries)
    await store.close()
    assert {entry_id: letter.reason for entry_id, letter in outcome.poison.items()} == {"1-0": "invalid_session_id"}
    assert json.loads(session_file(root, "/agentbus", "door-ok").read_text())["uuid"] == good.uuid
    assert not (tmp_path / "escape-test.lock").exists()
