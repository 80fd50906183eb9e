"""Issue 26, our files out: every transcript agentbus writes is a session the real clients open.

The transcripts are written by the transcript worker's own store (``TranscriptStore`` configured as
``workers/transcripts/app.py`` configures it) into a private Claude Code config dir, for sessions with
parallel tools, a failing tool, signed thinking, a sub-agent (its file beside the parent's) and a reply
tombstoned after it was written. Then:

- ``claude -p PROMPT --resume <uuid>`` (Claude Code 2.1.332), run in the session's cwd with that config dir,
  accepts it and its request carries the whole history: ``agentbus normalize FILE --prompt PROMPT``'s
  messages, apart from what the client adds around the new prompt (its ``role: "system"`` messages and
  ``<system-reminder>`` texts: environment, date, listings);
- ``agentbus transcript convert FILE --to pi`` is accepted by ``pi --session`` (0.73.1), and pi's own request
  passes ``validate_api_request`` — all but role alternation: pi sends consecutive user messages on purpose
  and today's API combines them (anthropic-api-rules.md §1.5); the validator still flags it;
- the round trips Claude Code → pi → Claude Code (on Claude Code's own fresh files) and pi → Claude Code → pi
  (on pi's) keep the request.
"""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from agentbus_redis.agents.ids import agent_id_for, child_session_id
from agentbus_redis.api.validation import validate_api_request
from agentbus_redis.messages.content import TextBlock
from agentbus_redis.messages.factories import create_assistant_message
from agentbus_redis.messages.kinds import Message, parse_message
from agentbus_redis.session_ids import claude_session_id
from agentbus_redis.transcript_files.layout import session_file
from agentbus_redis.transcript_files.lines import SessionStamp
from agentbus_redis.transcript_files.store import StoreConfig, TranscriptStore
from tests.compat.capture_server import CaptureServer, Script, Text, reply
from tests.compat.clients import ClaudeCodeHome, PiHome
from tests.compat.requests import first_difference, normalize, run_agentbus, without_cache_control
from tests.compat.sessions import FreshFile
from tests.shared.generated_sessions import current_client_session, thinking_loop_session, tool_rounds_session

pytestmark = pytest.mark.slow

PROMPT = "what next?"
COMBINED_BY_THE_API = {"roles_not_alternating"}
"""pi sends consecutive user messages; the current API combines them (spec §1.5): the client wins."""


@dataclass(frozen=True)
class WrittenSession:
    name: str
    session_id: str
    path: Path
    tool_use_ids: list[str]


def _messages(data: bytes) -> list[Message]:
    return [parse_message(json.loads(line)) for line in data.splitlines() if line.strip()]


def _subagent_parent() -> tuple[list[Message], list[Message]]:
    """A parent whose Agent call ran a sub-agent (its answer the call's result), and the sub-agent's turn."""
    parent = _messages(
        b"\n".join(
            json.dumps(line).encode()
            for line in [
                {"type": "user", "uuid": "sa-0", "timestamp": "2026-01-01T00:00:00.000Z",
                 "message": {"role": "user", "content": "have a helper count the files"}},
                {"type": "assistant", "uuid": "sa-1", "timestamp": "2026-01-01T00:00:01.000Z",
                 "message": {"id": "msg_sa_1", "type": "message", "role": "assistant", "model": "claude-sonnet-4-5",
                             "content": [{"type": "tool_use", "id": "toolu_agent_1", "name": "Agent",
                                          "input": {"description": "count", "prompt": "count the files"}}],
                             "stop_reason": "tool_use", "stop_sequence": None,
                             "usage": {"input_tokens": 10, "output_tokens": 5}}},
                {"type": "user", "uuid": "sa-2", "timestamp": "2026-01-01T00:00:05.000Z",
                 "sourceToolAssistantUUID": "sa-1",
                 "message": {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_agent_1",
                                                          "content": [{"type": "text", "text": "42 files"}]}]}},
                {"type": "assistant", "uuid": "sa-3", "timestamp": "2026-01-01T00:00:06.000Z",
                 "message": {"id": "msg_sa_3", "type": "message", "role": "assistant", "model": "claude-sonnet-4-5",
                             "content": [{"type": "text", "text": "The helper counted 42 files."}],
                             "stop_reason": "end_turn", "stop_sequence": None,
                             "usage": {"input_tokens": 10, "output_tokens": 5}}},
            ]
        )
    )  # fmt: skip
    child = _messages(thinking_loop_session())
    return parent, child


async def _write_sessions(config_dir: Path, cwd: str) -> list[WrittenSession]:
    store = TranscriptStore(config_dir, StoreConfig(stamp=SessionStamp(entrypoint="agentbus", git_branch=None)))
    written: list[WrittenSession] = []

    async def record(name: str, session: str, messages: list[Message]) -> None:
        await store.record(session, messages, cwd=cwd, continue_chain=True)
        ids = [b.id for m in messages for b in getattr(m, "blocks", []) if getattr(b, "type", None) == "tool_use"]
        written.append(WrittenSession(name, session, session_file(config_dir, cwd, session), ids))

    try:
        await record("parallel-tools", "files-out-tools", _messages(tool_rounds_session()))
        await record("failing-tool", "files-out-failing", _messages(current_client_session()))
        # The tool loop with signed thinking, closed by a final answer (an open loop is resumed by R7.20's
        # continuation, which the client does not send: test_claude_code_in.py covers that case).
        closed = create_assistant_message([TextBlock(text="parser.py has 120 lines, its tests 340.")])
        await record("thinking", "files-out-thinking", [*_messages(thinking_loop_session()), closed])
        parent, child = _subagent_parent()
        await record("subagent", "files-out-subagent", parent)
        child_id = child_session_id("files-out-subagent", agent_id_for("files-out-subagent", "toolu_agent_1"))
        await store.record(child_id, child, cwd=cwd, continue_chain=True)
        # A reply written, then tombstoned (R6.3: its line removed): the file reads as if it never was.
        rounds = _messages(tool_rounds_session(1, session="files-out-tomb"))
        await record("tombstoned", "files-out-tombstoned", rounds)
        last_reply = next(m for m in reversed(rounds) if m.type == "assistant")
        await store.remove("files-out-tombstoned", last_reply.uuid, cwd=cwd)
    finally:
        await store.close()
    return written


@pytest.fixture(scope="module")
def claude_home(
    claude_code_binary: Path, capture_server: CaptureServer, tmp_path_factory: pytest.TempPathFactory
) -> ClaudeCodeHome:
    return ClaudeCodeHome(claude_code_binary, capture_server, tmp_path_factory.mktemp("files-out-claude"))


@pytest.fixture(scope="module")
def written(claude_home: ClaudeCodeHome) -> list[WrittenSession]:
    """agentbus' transcripts in the client's config dir, under the project dir of the session's real cwd."""
    return asyncio.run(_write_sessions(claude_home.config_dir, str(claude_home.project)))


SESSIONS = ["parallel-tools", "failing-tool", "thinking", "subagent", "tombstoned"]


def _session(written: list[WrittenSession], name: str) -> WrittenSession:
    return next(session for session in written if session.name == name)


def _client_side(block: dict[str, Any]) -> bool:
    """A block the comparison reads through: a ``<system-reminder>`` text the client adds for the new prompt,
    or thinking — Claude Code 2.1.332 run without a thinking config sends no thinking of closed turns, while
    ``agentbus normalize`` keeps them (both valid: API §1.10 binds only the open turn's thinking)."""
    if block.get("type") in {"thinking", "redacted_thinking"}:
        return True
    return block.get("type") == "text" and str(block.get("text", "")).startswith("<system-reminder>")


def _without_client_additions(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The client's request without what Claude Code adds around a new prompt: ``role: "system"`` messages
    and ``<system-reminder>`` text blocks (environment, date, agent and skill listings)."""
    kept: list[dict[str, Any]] = []
    for message in without_cache_control(messages):
        if message["role"] == "system":
            continue
        content = message["content"]
        if isinstance(content, list):
            content = [block for block in content if not _client_side(block)]
            if len(content) == 1 and content[0].get("type") == "text":
                content = content[0]["text"]
        if content:
            kept.append({**message, "content": content})
    return kept


def _as_ours(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Our messages in the same reading: a one-text-block content as a string."""
    return _without_client_additions(messages)


@pytest.mark.parametrize("name", SESSIONS)
def test_claude_resume_accepts_our_transcript_and_sends_its_whole_history(
    claude_home: ClaudeCodeHome, written: list[WrittenSession], name: str, tmp_path: Path
) -> None:
    session = _session(written, name)
    uuid = claude_session_id(session.session_id)
    assert session.path.name == f"{uuid}.jsonl"
    assert json.loads(session.path.read_text().splitlines()[0])["cwd"] == str(claude_home.project)
    snapshot = tmp_path / session.path.name
    snapshot.write_bytes(session.path.read_bytes())  # the client appends its new turn to the file
    ours, _ = normalize(snapshot, "--prompt", PROMPT, cwd=tmp_path)
    run = claude_home.run(PROMPT, Script(main=[reply(Text("Noted."))]), "--resume", uuid)
    client = run.main_requests[0].body
    assert client is not None
    sent = _without_client_additions(client["messages"])
    expected = _as_ours(ours)
    assert sent == expected, first_difference(sent, expected)
    assert run.session_id() == uuid


@pytest.mark.parametrize("name", SESSIONS)
def test_pi_opens_the_converted_transcript_and_its_request_is_valid(
    pi_binary: Path,
    capture_server: CaptureServer,
    written: list[WrittenSession],
    name: str,
    tmp_path: Path,
) -> None:
    session = _session(written, name)
    converted = tmp_path / "session.jsonl"
    outcome = run_agentbus(
        "transcript", "convert", str(session.path), "--to", "pi", "--out", str(converted), cwd=tmp_path
    )
    assert outcome.code == 0, outcome.stderr
    assert outcome.stderr == ""  # no warning: the header names the session's cwd, a directory that exists
    header = json.loads(converted.read_text().splitlines()[0])
    assert Path(header["cwd"]).is_dir()
    home = PiHome(pi_binary, capture_server, tmp_path / "pi")
    run = home.run(PROMPT, Script(main=[reply(Text("Noted."))]), "--session", str(converted))
    body = run.main_requests[0].body
    assert body is not None
    messages = body["messages"]
    problems = [v for v in validate_api_request(messages) if v.rule not in COMBINED_BY_THE_API]
    assert problems == []
    sent = json.dumps(messages)
    assert "No result provided" not in sent or name == "tombstoned"
    for tool_use_id in session.tool_use_ids:
        assert tool_use_id in sent or name == "tombstoned"


def _convert(source: Path, to: str, out: Path, cwd: Path) -> Path:
    outcome = run_agentbus("transcript", "convert", str(source), "--to", to, "--out", str(out), cwd=cwd)
    assert outcome.code == 0, outcome.stderr
    return out


def test_claude_code_to_pi_to_claude_code_keeps_the_request(claude_code_files: list[FreshFile], tmp_path: Path) -> None:
    for file in claude_code_files:
        pi = _convert(file.path, "pi", tmp_path / f"{file.name}.pi.jsonl", tmp_path)
        back = _convert(pi, "claude-code", tmp_path / f"{file.name}.back.jsonl", tmp_path)
        args = ("--prompt", PROMPT) if file.leaf is None else ("--leaf", file.leaf)
        before, _ = normalize(file.path, *args, cwd=tmp_path)
        after, _ = normalize(back, *args, cwd=tmp_path)
        assert after == before, f"{file.name}: {first_difference(before, after)}"


def test_pi_to_claude_code_to_pi_keeps_the_request(pi_files: list[FreshFile], tmp_path: Path) -> None:
    for file in pi_files:
        claude_code = _convert(file.path, "claude-code", tmp_path / f"{file.name}.cc.jsonl", tmp_path)
        back = _convert(claude_code, "pi", tmp_path / f"{file.name}.back.jsonl", tmp_path)
        for rules in ("pi", "agentbus"):
            before, _ = normalize(file.path, "--rules", rules, cwd=tmp_path)
            after, _ = normalize(back, "--rules", rules, cwd=tmp_path)
            assert after == before, f"{file.name} ({rules}): {first_difference(before, after)}"
