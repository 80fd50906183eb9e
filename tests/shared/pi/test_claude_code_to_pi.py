"""Issue 26, Claude Code → pi (P10.1): a reply's per-block lines become ONE pi assistant message (by
``message.id``), so the request pi itself builds from a converted file is valid; thinking and signatures
survive; the pi header names the session's working directory; and the round trips keep the request.

Role alternation: pi sends consecutive user messages on purpose and the current Messages API combines them
(anthropic-api-rules.md §1.5, "legacy on the first-party API"); ``validate_api_request`` still flags them,
so the checks of pi's own request leave that one rule out — the API, not the spec's older rule, wins."""

from __future__ import annotations

import json
from typing import Any

import pytest

from agentbus_redis.api.validation import ApiViolation, validate_api_request
from agentbus_redis.clock import utc_now
from agentbus_redis.ids import random_uuid
from agentbus_redis.normalize import to_api_request
from agentbus_redis.pi.claude_code import (
    CLAUDE_CODE_STASH,
    claude_code_to_session,
    merge_reply_lines,
    session_to_claude_code,
)
from agentbus_redis.pi.request import claude_code_messages, llm_view, pi_own_request, with_prompt
from agentbus_redis.pi.session import read_pi_session
from agentbus_redis.transcript import resume_session
from tests.shared.generated_sessions import GENERATED_SESSIONS, current_client_session

PROMPT = "continue"
COMBINED_BY_THE_API = {"roles_not_alternating"}


def lines_of(data: bytes) -> list[dict[str, Any]]:
    return [json.loads(line) for line in data.splitlines() if line.strip()]


def to_pi(lines: list[dict[str, Any]], **options: Any) -> bytes:
    header, entries = claude_code_to_session(lines, **options)
    return "".join(json.dumps(obj) + "\n" for obj in [header, *entries]).encode()


def pi_request(pi: bytes) -> list[dict[str, Any]]:
    """The request pi itself sends for the session with ``PROMPT`` typed (P5/P6, unrepaired)."""
    view = with_prompt(llm_view(read_pi_session(pi, ids=random_uuid)), PROMPT, now_ms=0)
    return list(pi_own_request(view)["messages"])


def violations(messages: list[dict[str, Any]]) -> list[ApiViolation]:
    return [v for v in validate_api_request(messages) if v.rule not in COMBINED_BY_THE_API]


def claude_code_request(data: bytes) -> object:
    resumed = resume_session(data, clock=utc_now, ids=random_uuid)
    return to_api_request(resumed.messages, prompt=PROMPT, clock=utc_now, ids=random_uuid).request["messages"]


def test_p10_1_a_replys_lines_become_one_pi_assistant_message() -> None:
    """The current client's file: text and two parallel calls on three lines of one message.id → one
    assistant entry with the three blocks; each result hangs on the entry before it (pi's path)."""
    _, entries = claude_code_to_session(lines_of(current_client_session()))
    assistants = [e for e in entries if e.get("type") == "message" and e["message"]["role"] == "assistant"]
    assert [[b["type"] for b in e["message"]["content"]] for e in assistants] == [
        ["text", "toolCall", "toolCall"],
        ["toolCall"],
        ["text"],
    ]
    assert assistants[0]["message"]["stopReason"] == "toolUse"
    results = [e for e in entries if e.get("type") == "message" and e["message"]["role"] == "toolResult"]
    assert results[0]["parentId"] == assistants[0]["id"]
    assert results[1]["parentId"] == results[0]["id"]


def test_merged_lines_keep_their_children_on_the_merged_line() -> None:
    lines = lines_of(current_client_session())
    merged = merge_reply_lines(lines)
    assert len(merged) == len(lines) - 1
    replies = [line for line in lines if line.get("message", {}).get("id") == "msg_current_parallel"]
    assert len(replies) == 2
    assert replies[1]["uuid"] not in {line.get("parentUuid") for line in merged}  # its result hangs on the first


@pytest.mark.parametrize("name", sorted(GENERATED_SESSIONS))
def test_pi_own_request_from_a_converted_file_is_valid(name: str) -> None:
    """Before issue 26 pi split parallel calls into messages of their own and answered them with its own
    "No result provided" errors ahead of the real results. Now each call is answered once, by the file's
    result (pi's own placeholder only for the call the file left without one: the interrupted session)."""
    data = GENERATED_SESSIONS[name]()
    messages = pi_request(to_pi(lines_of(data)))
    assert violations(messages) == []
    answered = [
        block["tool_use_id"]
        for message in messages
        if isinstance(message["content"], list)
        for block in message["content"]
        if block.get("type") == "tool_result"
    ]
    assert len(answered) == len(set(answered))
    placeholders = json.dumps(messages).count("No result provided")
    contents = [line["message"]["content"] for line in lines_of(data) if line["type"] == "user"]
    recorded = {b["tool_use_id"] for c in contents if isinstance(c, list) for b in c if b.get("type") == "tool_result"}
    assert placeholders == len(set(answered) - recorded)


def test_thinking_and_its_signature_survive_both_ways() -> None:
    data = GENERATED_SESSIONS["thinking-loop"]()
    pi = to_pi(lines_of(data))
    blocks = [b for e in lines_of(pi)[1:] if e.get("type") == "message" for b in e["message"].get("content", [])
              if isinstance(b, dict) and b.get("type") == "thinking"]  # fmt: skip
    assert {(b.get("thinkingSignature"), b.get("redacted", False)) for b in blocks} == {
        ("EqQBsig0==", False),
        ("EqQBCkYIBxgCKkD+/==", False),
        ("EmwKAhgBEgy3va3pzix/LafPsn4a", True),
    }
    sent = json.dumps(pi_request(pi))
    assert "EqQBCkYIBxgCKkD+/==" in sent
    assert "EmwKAhgBEgy3va3pzix/LafPsn4a" in sent


def test_the_pi_header_names_the_sessions_cwd() -> None:
    """The first line of a current client's file is metadata without a cwd: the first line with one names it;
    ``cwd`` overrides it."""
    lines = [{"type": "queue-operation", "operation": "enqueue"}, *lines_of(current_client_session())]
    header = lines_of(to_pi(lines))[0]
    assert header["cwd"] == "/home/alice/proj"
    assert header["id"] == "gen-current"
    assert lines_of(to_pi(lines, cwd="/srv/work"))[0]["cwd"] == "/srv/work"


@pytest.mark.parametrize("name", sorted(GENERATED_SESSIONS))
def test_claude_code_to_pi_to_claude_code_keeps_every_line_and_the_request(name: str) -> None:
    data = GENERATED_SESSIONS[name]()
    pi = lines_of(to_pi(lines_of(data)))
    back = session_to_claude_code(pi[0], pi[1:])
    assert back[0].pop("pi") == {"header": pi[0]}  # the header rides on the first line, as from any pi file
    assert back == lines_of(data)
    assert claude_code_request("".join(json.dumps(line) + "\n" for line in back).encode()) == claude_code_request(data)
    assert all(CLAUDE_CODE_STASH in entry for entry in pi[1:])


@pytest.mark.parametrize("name", sorted(GENERATED_SESSIONS))
def test_pi_to_claude_code_to_pi_keeps_pis_request(name: str) -> None:
    pi = lines_of(to_pi(lines_of(GENERATED_SESSIONS[name]())))
    claude_code = session_to_claude_code(pi[0], pi[1:])
    again = to_pi(claude_code)
    assert pi_request(again) == pi_request("".join(json.dumps(obj) + "\n" for obj in pi).encode())
    session = read_pi_session(again, ids=random_uuid)
    assert claude_code_messages(llm_view(session), session_id=session.session_id, cwd=session.header.cwd)
