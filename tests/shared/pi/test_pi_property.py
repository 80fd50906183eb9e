"""Property tests on generated pi sessions (issue 17): whatever pi wrote — failed turns with calls, late,
duplicate and orphan results, shell escapes between a call and its result (P9.2), thinking of other
providers, compactions — ours is accepted by the API, keeps every result pi would keep, and the P10
mapping round-trips losslessly."""

from __future__ import annotations

import json
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agentbus_redis.api.validation import validate_api_request
from agentbus_redis.ids import SequentialIds
from agentbus_redis.normalize import to_api_request
from agentbus_redis.pi.claude_code import claude_code_to_session, session_to_claude_code
from agentbus_redis.pi.messages import PiAssistantMessage, PiToolResultMessage
from agentbus_redis.pi.request import claude_code_messages, llm_view
from agentbus_redis.pi.session import read_pi_session
from agentbus_redis.pi.transform import normalize_anthropic_tool_call_id, repair_orphans
from tests.shared.pi.builders import MODEL, Obj, header, session_file

OTHER_MODEL = {"api": "openai-responses", "provider": "openai", "model": "gpt-5"}


@st.composite
def pi_sessions(draw: st.DrawFn) -> bytes:
    entries: list[Obj] = []
    counter = iter(range(10_000))

    def add(kind: str, **fields: Any) -> None:
        number = next(counter)
        parent = entries[-1]["id"] if entries else None
        stamp = f"2026-01-01T00:{number // 60 % 60:02d}:{number % 60:02d}.000Z"
        entries.append({"type": kind, "id": f"e{number}", "parentId": parent, "timestamp": stamp, **fields})

    def user(text: str) -> None:
        add("message", message={"role": "user", "content": [{"type": "text", "text": text}], "timestamp": 1})

    user("start")
    for turn in range(draw(st.integers(1, 6))):
        calls = [f"toolu_{turn}_{n}" + draw(st.sampled_from(["", "|x+y"])) for n in range(draw(st.integers(0, 3)))]
        blocks: list[Obj] = []
        if draw(st.booleans()):
            signature = draw(st.sampled_from(["", "sig", None]))
            thinking = {"type": "thinking", "thinking": draw(st.sampled_from(["plan", " ", ""]))}
            blocks.append(thinking | ({"thinkingSignature": signature} if signature is not None else {}))
        if draw(st.booleans()):
            blocks.append({"type": "text", "text": draw(st.sampled_from(["ok", " ", ""]))})
        blocks += [{"type": "toolCall", "id": call, "name": "bash", "arguments": {"n": 1}} for call in calls]
        stop = draw(st.sampled_from(["toolUse", "toolUse", "stop", "length", "error", "aborted"]))
        model = draw(st.sampled_from([MODEL, MODEL, OTHER_MODEL]))
        usage = {"input": 1, "output": 1, "cacheRead": 0, "cacheWrite": 0, "totalTokens": 2}
        assistant = {
            "role": "assistant",
            "content": blocks,
            **model,
            "usage": usage,
            "stopReason": stop,
            "timestamp": 2,
        }
        add("message", message=assistant | ({"errorMessage": "terminated"} if stop in {"error", "aborted"} else {}))
        for call in calls:
            what = draw(st.sampled_from(["result", "result", "missing", "duplicate", "bash_before"]))
            if what == "missing":
                continue
            if what == "bash_before":
                add("message", message={"role": "bashExecution", "command": "open x", "output": "", "exitCode": 0})
            result = {"role": "toolResult", "toolCallId": call, "toolName": "bash", "isError": False, "timestamp": 3,
                      "content": [{"type": "text", "text": f"result of {call}"}], "details": {}}  # fmt: skip
            add("message", message=result)
            if what == "duplicate":
                add("message", message=result)
        if draw(st.booleans()):
            add("message", message={"role": "toolResult", "toolCallId": f"orphan{turn}", "toolName": "bash",
                                    "content": [{"type": "text", "text": "stray"}], "isError": True})  # fmt: skip
        if draw(st.integers(0, 5)) == 0 and len(entries) > 2:
            add("compaction", summary="S", firstKeptEntryId=entries[len(entries) // 2]["id"], tokensBefore=5)
        user(f"next {turn}")
    return session_file(header("gen"), *entries)


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(pi_sessions())
def test_ours_is_always_accepted_and_loses_no_kept_result(data: bytes) -> None:
    session = read_pi_session(data, ids=SequentialIds())
    view = llm_view(session)
    request = to_api_request(claude_code_messages(view, session_id="gen", cwd="/p"), prompt="go").request
    assert validate_api_request({"messages": request["messages"]}) == [], json.dumps(request)[:2000]

    # Every result of a call pi keeps (its assistant did not fail) is in the request.
    kept_calls = {
        normalize_anthropic_tool_call_id(call.id)
        for message in repair_orphans(view.llm)
        if isinstance(message, PiAssistantMessage)
        for call in message.tool_calls()
    }
    recorded = {
        normalize_anthropic_tool_call_id(message.tool_call_id)
        for message in view.llm
        if isinstance(message, PiToolResultMessage)
    }
    body = json.dumps(request)
    for call_id in kept_calls & recorded:
        assert f"result of {call_id}" in body or f"result of {call_id.replace('_x_y', '|x+y')}" in body, call_id


@settings(max_examples=100, deadline=None)
@given(pi_sessions())
def test_p10_round_trip_is_lossless_on_generated_sessions(data: bytes) -> None:
    session = read_pi_session(data, ids=SequentialIds())
    header_wire = session.header.to_wire()
    entries = [entry.to_wire() for entry in session.entries]
    back_header, back_entries = claude_code_to_session(
        json.loads(json.dumps(session_to_claude_code(header_wire, entries)))
    )
    assert (back_header, back_entries) == (header_wire, entries)
