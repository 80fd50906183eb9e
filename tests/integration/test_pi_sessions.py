"""Issue 17, pi sessions end to end through real processes: ``agentbus replay`` of a pi session file (the
four corpus files, and the suite's own generated ones) publishes ours — the context (P8) as Claude Code
messages — and the transcript the transcripts worker persists normalizes to exactly the request
``agentbus normalize`` builds from the pi file; with ``AGENTBUS_TRANSCRIPT_FORMAT=pi`` the worker also
keeps ``<session>.pi.jsonl``, a pi session file whose request is that same one (P10 mapping back)."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from agentbus_redis.api.validation import validate_api_request
from agentbus_redis.messages.kinds import TombstoneMessage, parse_message
from agentbus_redis.normalize import to_api_request
from agentbus_redis.pi.entries import PiMessageEntry
from agentbus_redis.pi.session import looks_like_pi_session
from agentbus_redis.sdk.client import AgentbusClient
from agentbus_redis.sdk.replay import replay_transcript
from agentbus_redis.transcript_files.layout import session_file
from agentbus_redis.transcript_files.pi_mirror import pi_session_path
from agentbus_redis.transcript_files.pi_view import pi_request, read_pi_file
from tests.conftest import CORPUS_ROOT, corpus_cases
from tests.integration.cluster import WorkerCluster, eventually
from tests.integration.test_replay_equivalence import settings_of
from tests.shared.pi.builders import a, tc, text, tr, u
from tests.shared.pi.generated import GENERATED_PI_SESSIONS

pytestmark = [pytest.mark.integration, pytest.mark.slow]

PROMPT = "continue"
PI_FILES = corpus_cases("pi")


@pytest.fixture(scope="module")
def pi_cluster(module_cluster: WorkerCluster) -> WorkerCluster:
    module_cluster.extra_env["AGENTBUS_TRANSCRIPT_FORMAT"] = "pi"
    module_cluster.start_all(instances=1)
    return module_cluster


@pytest.fixture
async def bus(pi_cluster: WorkerCluster) -> AsyncIterator[AgentbusClient]:
    async with pi_cluster.client() as client:
        yield client


def persisted_request(transcript: bytes) -> list[object]:
    """The request of the persisted transcript's messages, in file order (the context is one chain)."""
    messages = [parse_message(json.loads(line)) for line in transcript.splitlines() if line.strip()]
    return list(to_api_request(messages, prompt=PROMPT).request["messages"])


async def assert_pi_replay_equivalent(data: bytes, session: str, cluster: WorkerCluster, bus: AgentbusClient) -> None:
    expected = pi_request(read_pi_file(data), prompt=PROMPT)["messages"]
    report = await replay_transcript(bus, data, session_id=session, settings=settings_of(cluster), timeout_s=60)
    persisted = report.transcript.read_bytes()
    assert persisted_request(persisted) == expected
    assert validate_api_request({"messages": expected}) == []
    mirror = pi_session_path(report.transcript).read_bytes()
    assert looks_like_pi_session(mirror)
    assert pi_request(read_pi_file(mirror), prompt=PROMPT)["messages"] == expected
    dead = await bus.redis.xlen(cluster.names.dead_letter_stream(bus.topology.ingress_for(session)))
    assert dead == 0


@pytest.mark.parametrize("path", PI_FILES, ids=lambda p: p.relative_to(CORPUS_ROOT / "pi").as_posix())
async def test_replayed_pi_corpus_file_persists_the_offline_request(
    path: Path, pi_cluster: WorkerCluster, bus: AgentbusClient
) -> None:
    await assert_pi_replay_equivalent(path.read_bytes(), f"pi-replay-{path.stem}", pi_cluster, bus)


@pytest.mark.parametrize("name", sorted(GENERATED_PI_SESSIONS))
async def test_replayed_generated_pi_session_persists_the_offline_request(
    name: str, pi_cluster: WorkerCluster, bus: AgentbusClient
) -> None:
    await assert_pi_replay_equivalent(GENERATED_PI_SESSIONS[name](), f"pi-generated-{name}", pi_cluster, bus)


def agentbus(cluster: WorkerCluster, *args: str) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(
        [sys.executable, "-m", "agentbus_redis.cli.main", *args],
        env=cluster.env(),
        capture_output=True,
        check=False,
        timeout=90,
    )


def test_cli_replay_and_tail_of_a_pi_file(pi_cluster: WorkerCluster, tmp_path: Path) -> None:
    """``agentbus replay PI_FILE`` then ``agentbus tail SESSION --format pi`` prints the log as pi entries."""
    path = tmp_path / "rounds.jsonl"
    path.write_bytes(GENERATED_PI_SESSIONS["tool_rounds"]())
    done = agentbus(pi_cluster, "replay", str(path), "--session", "pi-cli-replay", "--timeout", "60")
    assert done.returncode == 0, done.stderr.decode(errors="replace")
    assert "events published" in done.stderr.decode()
    tail = agentbus(pi_cluster, "tail", "pi-cli-replay", "--format", "pi")
    assert tail.returncode == 0, tail.stderr.decode(errors="replace")
    entries = [json.loads(line) for line in tail.stdout.decode().splitlines()]
    roles = [entry["message"]["role"] for entry in entries if entry["type"] == "message"]
    assert roles == [
        "user",
        "assistant",
        "toolResult",
        "toolResult",
        "assistant",
        "user",
        "assistant",
        "toolResult",
        "assistant",
    ]


async def test_sdk_pi_messages_are_mapped_at_ingestion(pi_cluster: WorkerCluster, bus: AgentbusClient) -> None:
    """``send_pi_message``: pi-shaped user / assistant / toolResult messages reach the log as Claude Code
    messages (P10), the normalizer builds a valid request from them, and the pi mirror gives them back."""
    session = "pi-sdk-producer"
    await bus.send_pi_message(session, u("list files"))
    first = await bus.next_request(session, after_seq=0, timeout_s=30)
    assert json.dumps(first.request["messages"]).count("list files") == 1
    await bus.send_pi_message(session, a(text("calling"), tc("toolu_sdk1")), execute_tools=False)
    await bus.send_pi_message(session, tr("toolu_sdk1", "a b"))
    await bus.send_pi_message(session, a(text("two files"), stop="stop"))

    async def logged(count: int) -> bool:
        return len(await bus.history(session)) == count

    await eventually(lambda: logged(4))
    before = await bus.latest_request(session)
    await bus.send_prompt(session, "thanks")
    request = await bus.next_request(session, after_seq=before.seq if before else 0, timeout_s=30)
    messages = request.request["messages"]
    assert validate_api_request({"messages": messages}) == []
    blocks = [block for message in messages if isinstance(message["content"], list) for block in message["content"]]
    assert {block["type"] for block in blocks} >= {"tool_use", "tool_result"}
    assert [entry.message.type for entry in await bus.history(session)] == [
        "user",
        "assistant",
        "user",
        "assistant",
        "user",
    ]
    transcript = settings_of(pi_cluster)
    path = session_file(transcript.data_dir, transcript.session_cwd, session)

    async def mirrored() -> bool:
        mirror = pi_session_path(path)
        return mirror.exists() and len(read_pi_file(mirror.read_bytes()).entries) == 5

    await eventually(mirrored)
    mirror = read_pi_file(pi_session_path(path).read_bytes())
    roles = [entry.message.role for entry in mirror.entries if isinstance(entry, PiMessageEntry)]
    assert roles == ["user", "assistant", "toolResult", "assistant", "user"]


async def test_the_pi_mirror_is_rewritten_when_a_tombstone_removes_a_line(
    pi_cluster: WorkerCluster, bus: AgentbusClient
) -> None:
    """R6.3: the Claude Code transcript loses the retracted line; the pi file derived from it follows."""
    session = "pi-mirror-tombstone"
    settings = settings_of(pi_cluster)
    path = session_file(settings.data_dir, settings.session_cwd, session)

    async def mirrored(count: int) -> bool:
        mirror = pi_session_path(path)
        return mirror.exists() and len(read_pi_file(mirror.read_bytes()).entries) == count

    await bus.send_pi_message(session, u("hi"), message_uuid="pi-mirror-user")
    await bus.send_pi_message(session, a(text("partial"), stop="stop"), message_uuid="pi-mirror-partial")
    await eventually(lambda: mirrored(2))
    partial = (await bus.history(session))[1].message
    await bus.send_recorded(session, TombstoneMessage(message=partial))
    await eventually(lambda: mirrored(1))
    assert b"pi-mirror-partial" not in path.read_bytes()
    (entry,) = read_pi_file(pi_session_path(path).read_bytes()).entries
    assert entry.id == "pi-mirror-user"
