"""Issue 4, replay equivalence: every recorded Claude Code session of the corpus, and the sessions the suite
generates itself (they run on a fresh clone without the corpus, issue 16), pushed through the bus by
``agentbus replay`` (ingestion → log → transcript worker), normalizes to the same API request as the
original file (R7.14–R7.20 resume, then §4 normalization, with the same new prompt appended) — and, without a
prompt and in the normalization worker's thinking mode, to the same open turn with its thinking unmodified
(anthropic-api-rules.md §1.10)."""

from __future__ import annotations

import json
import subprocess
import sys
import zlib
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any, cast

import pytest

from agentbus_redis.api.types import MessageParam, MessagesRequest
from agentbus_redis.api.validation import validate_api_request
from agentbus_redis.bus.events import IngressPayload, RecordedMessage
from agentbus_redis.config.settings import Settings
from agentbus_redis.messages.kinds import AssistantMessage, UserMessage, parse_message
from agentbus_redis.normalize import to_api_request, validate_request
from agentbus_redis.sdk.client import AgentbusClient
from agentbus_redis.sdk.replay import ReplayPlan, replay_transcript, wait_until_persisted
from agentbus_redis.session_ids import claude_session_id
from agentbus_redis.transcript import TranscriptMessage
from agentbus_redis.transcript_files.api_view import api_view_of_transcript
from agentbus_redis.transcript_files.layout import session_file
from agentbus_redis.workers.normalization.worker import SENDER_FITS_THINKING as WORKER_OPTIONS
from tests.conftest import CORPUS_ROOT, ON_EVERY_TARGET, corpus_cases, on_targets, requires_corpus
from tests.integration.cluster import WorkerCluster
from tests.shared.generated_sessions import GENERATED_SESSIONS, thinking_loop_session, tool_rounds_session

pytestmark = [pytest.mark.integration, pytest.mark.slow]

PROMPT = "continue"
CORPUS_FILES = corpus_cases("claude-code")


@pytest.fixture(scope="module")
def replay_cluster(module_cluster: WorkerCluster) -> WorkerCluster:
    """One instance of every worker, shared by the module (sessions keep the tests apart)."""
    module_cluster.start_all(instances=1)
    return module_cluster


@pytest.fixture
async def bus(replay_cluster: WorkerCluster) -> AsyncIterator[AgentbusClient]:
    async with replay_cluster.client() as client:
        yield client


def settings_of(cluster: WorkerCluster) -> Settings:
    return Settings(
        redis_url=cluster.redis_url, data_dir=cluster.data_dir, shards=cluster.names.shards, cwd=cluster.cwd
    )


def session_for(path: Path) -> str:
    """A stable session id per corpus file, so a failure names the session to inspect."""
    relative = path.relative_to(CORPUS_ROOT).as_posix()
    return f"replay-{zlib.crc32(relative.encode()):08x}-{path.stem[:24]}"


def api_messages(data: bytes) -> list[MessageParam]:
    return api_view_of_transcript(data, prompt=PROMPT).request["messages"]


SENDER_FITS_THINKING = WORKER_OPTIONS
"""The normalization worker's options: the open turn keeps its signed thinking for the model worker (and a
reply's tool results go in call order)."""


def open_turn_messages(data: bytes) -> list[MessageParam]:
    """The session resumed as it stands, no new prompt, normalized as the normalization worker does: the
    open turn — the one a continued tool loop resends — keeps its thinking and redacted_thinking, which
    the API accepts only unmodified (anthropic-api-rules.md §1.10: "blocks in the latest assistant message
    cannot be modified"). With ``PROMPT`` appended that turn is closed and its thinking is kept in any
    mode, so this second comparison is the one that sees the open turn's thinking."""
    return api_view_of_transcript(data, options=SENDER_FITS_THINKING).request["messages"]


@requires_corpus
def test_corpus_has_the_claude_code_sessions() -> None:
    """The equivalence below is only meaningful if it covers the whole corpus."""
    assert len(CORPUS_FILES) == 24


async def request_notices(bus: AgentbusClient, session: str) -> list[int]:
    """The ``seq`` of every request the normalizer announced for ``session`` (its shard's requests stream)."""
    rows: Any = await bus.redis.xrange(bus.topology.requests_for(session))
    notices = [json.loads(fields[b"data"]) for _, fields in rows]
    return [notice["seq"] for notice in notices if notice["session_id"] == session]


async def assert_replay_equivalent(original: bytes, session: str, cluster: WorkerCluster, bus: AgentbusClient) -> None:
    report = await replay_transcript(
        bus, original, session_id=session, settings=settings_of(cluster), timeout_s=30, wait_all=True
    )
    # Issue 26: a replay is a recording. Every group (the normalizer too) has settled the whole replay and
    # no request was published for it, so no model call and no tool run could follow.
    assert await bus.latest_request(session) is None
    assert await request_notices(bus, session) == []
    persisted = report.transcript.read_bytes()
    lines = [json.loads(line) for line in persisted.splitlines() if line.strip()]
    uuids = [line["uuid"] for line in lines]
    assert len(uuids) == len(set(uuids)) > 0  # effectively-once per message uuid
    # Everything the resumed file holds is persisted, attachments (with what they rendered) included.
    assert {message.uuid for message in report.plan.history} <= set(uuids)
    objects = [json.loads(line) for line in original.splitlines() if line.strip()]
    recorded = {o["uuid"]: o for o in objects if isinstance(o, dict) and o.get("type") == "attachment" and "uuid" in o}
    for line in lines:
        if line["type"] == "attachment" and line["uuid"] in recorded:
            kept = ("attachment", "rendered", "renderedRole")
            assert {k: line.get(k) for k in kept} == {k: recorded[line["uuid"]].get(k) for k in kept}
    assert {line["sessionId"] for line in lines} == {report.claude_session_id}
    assert report.transcript.name == f"{report.claude_session_id}.jsonl"
    expected = api_messages(original)
    replayed = api_messages(persisted)
    assert replayed == expected
    assert validate_api_request({"messages": replayed}) == []
    open_turn = open_turn_messages(original)
    assert open_turn_messages(persisted) == open_turn  # API §1.10: the open turn's thinking survives the bus
    assert validate_request({"messages": open_turn}, options=SENDER_FITS_THINKING, allow_prefill=True) == []
    dead = await bus.redis.xlen(cluster.names.dead_letter_stream(bus.topology.ingress_for(session)))
    assert dead == 0


@on_targets("path", CORPUS_FILES, cluster_cases=CORPUS_FILES[::4], ids=lambda p: p.relative_to(CORPUS_ROOT).as_posix())
async def test_replayed_session_normalizes_like_the_original(
    path: Path, replay_cluster: WorkerCluster, bus: AgentbusClient
) -> None:
    """R7.14–R7.20 + §4: normalize(replay(FILE) persisted transcript) == normalize(FILE)."""
    await assert_replay_equivalent(path.read_bytes(), session_for(path), replay_cluster, bus)


@on_targets("name", sorted(GENERATED_SESSIONS))
async def test_replayed_generated_session_normalizes_like_the_original(
    name: str, replay_cluster: WorkerCluster, bus: AgentbusClient
) -> None:
    """The same equivalence on the suite's own sessions (parallel calls split over lines, progress and
    system lines, an interrupted turn, 40 tool rounds)."""
    await assert_replay_equivalent(GENERATED_SESSIONS[name](), f"replay-generated-{name}", replay_cluster, bus)


async def test_api_1_10_recorded_tool_loop_is_published_with_its_thinking_unmodified(
    replay_cluster: WorkerCluster, bus: AgentbusClient
) -> None:
    """The lines of a session left in a tool loop, recorded into the bus as they are (no resume, which
    would close the turn, R7.17): the session waits for the model, and the request the normalization
    worker publishes carries the open turn's thinking and redacted_thinking exactly as the transcript
    holds them, merged back from their lines in order (R4.7, API §1.10) — what the model worker sends
    with thinking on."""
    original = thinking_loop_session()
    session = "recorded-thinking-loop-request"
    lines = [json.loads(line) for line in original.splitlines()]
    payloads: list[tuple[str, IngressPayload]] = [
        (f"recorded:{line['uuid']}", RecordedMessage(message=parse_message(line))) for line in lines
    ]
    await bus.publish_many(session, payloads)
    await wait_until_persisted(bus, session, settings=settings_of(replay_cluster), timeout_s=60)
    history = await bus.history(session)
    assert len(history) == len(lines)
    # The last result completes the round: the request of the log's last entry.
    request = await bus.next_request(session, after_seq=history[-1].seq - 1, timeout_s=60)
    expected = [
        block
        for line in lines
        if line["type"] == "assistant" and line["message"]["id"] == "msg_thinking_loop"
        for block in line["message"]["content"]
    ]
    messages = request.request["messages"]
    assert [m["role"] for m in messages] == ["user", "assistant", "user", "assistant", "user"]
    assert messages[3] == {"role": "assistant", "content": expected}
    assert [b["type"] for b in expected[:2]] == ["thinking", "redacted_thinking"]
    assert validate_request(cast("MessagesRequest", request.request), options=SENDER_FITS_THINKING) == []


@ON_EVERY_TARGET
def test_cli_replay_prints_the_session_and_its_transcript(replay_cluster: WorkerCluster, tmp_path: Path) -> None:
    """``agentbus replay FILE --session ID`` prints the session id and the transcript path it waited for."""
    path = tmp_path / "tool_rounds.jsonl"
    path.write_bytes(tool_rounds_session())
    session = "replay-cli-tool-heavy"
    done = subprocess.run(
        [sys.executable, "-m", "agentbus_redis.cli.main", "replay", str(path), "--session", session, "--timeout", "30"],
        env=replay_cluster.env(),
        capture_output=True,
        check=False,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr.decode(errors="replace")
    printed_session, printed_path = done.stdout.decode().split()
    settings = settings_of(replay_cluster)
    assert printed_session == session
    assert Path(printed_path) == session_file(settings.data_dir, settings.session_cwd, session)
    lines = [json.loads(line) for line in Path(printed_path).read_text().splitlines()]
    resume_id = claude_session_id(session)  # a UUID: the id `claude --resume` takes
    assert {line["sessionId"] for line in lines} == {resume_id}
    assert Path(printed_path).name == f"{resume_id}.jsonl"
    assert f"cd {replay_cluster.cwd} && claude --resume {resume_id}" in done.stderr.decode()
    assert api_messages(Path(printed_path).read_bytes()) == api_messages(path.read_bytes())


async def test_issue26_replay_with_continue_turn_asks_the_model_once_at_the_end(
    replay_cluster: WorkerCluster, bus: AgentbusClient
) -> None:
    """``--continue-turn``: the recording goes in as a recording, then its last message live; the session
    waits for the model (the recorded round has every result), so exactly one request is published — after
    the whole file is logged, carrying the whole history (the open turn's thinking unmodified). The plan is
    the file's lines as they are: a Claude Code resume would close the open turn (R7.20), a pi session's
    context (P8) would not."""
    original = thinking_loop_session()
    session = "replay-continue-turn"
    lines = [parse_message(json.loads(line)) for line in original.splitlines()]
    recorded = [line for line in lines if isinstance(line, UserMessage | AssistantMessage)]
    await replay_transcript(
        bus,
        ReplayPlan(list[TranscriptMessage](recorded), len(lines), {}),
        session_id=session,
        settings=settings_of(replay_cluster),
        timeout_s=60,
        wait_all=True,
        continue_turn=True,
    )
    history = await bus.history(session)
    request = await bus.next_request(session, after_seq=0, timeout_s=60)
    assert await request_notices(bus, session) == [history[-1].seq]  # one, once the last (live) entry was in
    assert request.request["messages"] == to_api_request(recorded, options=SENDER_FITS_THINKING).request["messages"]
    assert [entry.replayed for entry in history] == [True] * (len(history) - 1) + [False]
