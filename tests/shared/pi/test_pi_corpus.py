"""The four real pi sessions of the corpus (P9): pi's own request reproduces P9.10, ours is always
accepted by the API, keeps every recorded result, and the P10 mapping round-trips losslessly."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest

from agentbus_redis.api.validation import validate_api_request
from agentbus_redis.ids import random_uuid
from agentbus_redis.normalize import to_api_request
from agentbus_redis.pi.claude_code import claude_code_to_session, session_to_claude_code
from agentbus_redis.pi.entries import PiMessageEntry
from agentbus_redis.pi.messages import PiToolResultMessage
from agentbus_redis.pi.request import claude_code_messages, llm_view, pi_own_request
from agentbus_redis.pi.session import PiSession, read_pi_session, write_pi_session
from agentbus_redis.pi.transform import normalize_anthropic_tool_call_id
from tests.conftest import CORPUS_ROOT, corpus_cases

PI_FILES = corpus_cases("pi")

P9_10 = {
    # file: (context messages, pi's Anthropic messages, synthetic results)
    "before-compaction.jsonl": (446, 440, 1),
    "large-session.jsonl": (914, 885, 0),
    "small.jsonl": (5, 5, 0),
    "redacted_real.jsonl": (4, 4, 0),
}


def load(path: Path) -> PiSession:
    return read_pi_session(path.read_bytes(), ids=random_uuid)


def name(path: Path) -> str:
    return path.relative_to(CORPUS_ROOT / "pi").as_posix()


@pytest.mark.parametrize("path", PI_FILES, ids=name)
def test_p9_10_pi_own_request_matches_the_spec_table(path: Path) -> None:
    context_count, anthropic_count, synthetic = P9_10[path.name]
    view = llm_view(load(path))
    request = pi_own_request(view)
    assert len(view.context.messages) == context_count
    assert len(request["messages"]) == anthropic_count
    texts = json.dumps(request).count('"No result provided"')
    assert texts == synthetic


@pytest.mark.parametrize("path", PI_FILES, ids=name)
def test_ours_is_accepted_and_keeps_every_recorded_result(path: Path) -> None:
    """Issue 17: never rejected (even where pi's own request is, P9.2/P9.9), every toolCall that has a
    toolResult in the context keeps that result, failed turns leave no unpaired call."""
    session = load(path)
    view = llm_view(session)
    messages = claude_code_messages(view, session_id=session.session_id, cwd=session.header.cwd)
    request = to_api_request(messages, prompt="continue").request
    assert validate_api_request({"messages": request["messages"]}) == []

    recorded = {
        normalize_anthropic_tool_call_id(message.tool_call_id): message
        for message in view.llm
        if isinstance(message, PiToolResultMessage)
    }
    sent: dict[str, object] = {}
    calls: set[str] = set()
    for message in request["messages"]:
        for block in message["content"] if isinstance(message["content"], list) else []:
            if block["type"] == "tool_use":
                calls.add(block["id"])
            if block["type"] == "tool_result":
                sent[block["tool_use_id"]] = block.get("content")
    assert set(sent) == calls  # every call answered, no orphan result
    for call_id in calls & recorded.keys():
        expected = "\n".join(getattr(part, "text", "") for part in recorded[call_id].content).strip()
        assert text_of(sent[call_id]).strip() == expected, call_id


def text_of(content: object) -> str:
    if isinstance(content, str):
        return content
    return "\n".join(block.get("text", "") for block in content or [] if isinstance(block, dict))  # type: ignore[attr-defined]


@pytest.mark.parametrize("path", PI_FILES, ids=name)
def test_p10_pi_to_claude_code_to_pi_is_lossless(path: Path) -> None:
    session = load(path)
    header = session.header.to_wire()
    entries = [entry.to_wire() for entry in session.entries]
    lines = json.loads(json.dumps(session_to_claude_code(header, entries)))
    back_header, back_entries = claude_code_to_session(lines)
    assert back_header == header
    assert back_entries == entries


@pytest.mark.parametrize("path", PI_FILES, ids=name)
def test_p7_v3_files_are_written_back_byte_for_byte(path: Path) -> None:
    data = path.read_bytes()
    session = load(path)
    if session.migrated_from is not None:
        assert [json.loads(line) for line in write_pi_session(session).splitlines()][1:] == [
            entry.to_wire() for entry in session.entries
        ]
    else:
        assert write_pi_session(session) == data


@pytest.mark.parametrize("path", PI_FILES, ids=name)
def test_p9_1_inventory(path: Path) -> None:
    kinds = Counter(
        entry.message.role if isinstance(entry, PiMessageEntry) else entry.type for entry in load(path).entries
    )
    expected = {
        "before-compaction.jsonl": {"user": 55, "assistant": 484, "toolResult": 448, "bashExecution": 3},
        "large-session.jsonl": {"user": 88, "assistant": 453, "toolResult": 373, "thinking_level_change": 103},
        "small.jsonl": {"user": 2, "assistant": 2, "compaction": 2},
        "redacted_real.jsonl": {"custom": 1, "user": 1, "assistant": 2, "toolResult": 1},
    }[path.name]
    assert {kind: kinds[kind] for kind in expected} == expected
