"""Which betas a request needs: a request holding ``role: "system"`` messages names the two Claude Code
2.1.332 sends with them (``model/betas.py``), one with ``clear_at`` the clear-at beta too, any other
request none (it stays on the plain Messages API)."""

from __future__ import annotations

import json

from agentbus_redis.json_types import JsonObject
from agentbus_redis.messages.kinds import parse_message
from agentbus_redis.model.betas import (
    MID_CONVERSATION_SYSTEM_CLEAR_AT,
    MID_CONVERSATION_TOOL_CHANGES,
    PER_TURN_CONTROL,
    required_betas,
)
from agentbus_redis.model.request import ModelDefaults, build_model_params, request_body
from agentbus_redis.model.session_config import SessionModelConfig
from agentbus_redis.normalize import to_api_request
from tests.shared.generated_sessions import chat_session, current_client_session

CLIENT_BETAS = ["per-turn-control-2026-07-01", "mid-conversation-tool-changes-2026-07-01"]
"""As Claude Code 2.1.332 names them in its ``anthropic-beta`` header, in its order."""


def user(text: str) -> JsonObject:
    return {"role": "user", "content": text}


def test_the_names_are_the_clients() -> None:
    assert [PER_TURN_CONTROL, MID_CONVERSATION_TOOL_CHANGES] == CLIENT_BETAS
    assert MID_CONVERSATION_SYSTEM_CLEAR_AT == "mid-conversation-system-clear-at-2026-08-21"


def test_a_request_without_system_messages_needs_no_beta() -> None:
    assert required_betas({"messages": [user("hi"), {"role": "assistant", "content": "hello"}, user("more")]}) == []
    assert required_betas({"messages": []}) == []
    # A top-level ``system`` is the plain API's own field.
    assert required_betas({"system": [{"type": "text", "text": "Be brief."}], "messages": [user("hi")]}) == []


def test_any_system_message_needs_the_clients_two_betas() -> None:
    text_only: JsonObject = {"role": "system", "content": "Today's date is 2026-11-27."}
    effort_only: JsonObject = {"role": "system", "content": [], "output_config": {"effort": "medium"}}
    tool_change: JsonObject = {
        "role": "system",
        "content": [{"type": "tool_addition", "tool": {"type": "tool_reference", "name": "Grep"}}],
    }
    for system in (text_only, effort_only, tool_change):
        assert required_betas({"messages": [user("hi"), system]}) == CLIENT_BETAS, system


def test_clear_at_adds_the_clear_at_beta() -> None:
    system: JsonObject = {"role": "system", "content": "The todo list is empty.", "clear_at": "next_user_message"}
    body: JsonObject = {"messages": [user("hi"), system]}
    assert required_betas(body) == [*CLIENT_BETAS, MID_CONVERSATION_SYSTEM_CLEAR_AT]


def test_malformed_messages_need_no_beta() -> None:
    """The stored request was validated before; whatever its shape, the rule reads it without raising."""
    assert required_betas({}) == []
    assert required_betas({"messages": "hi"}) == []
    assert required_betas({"messages": ["system", 3, None]}) == []


def sent_body(transcript: bytes) -> JsonObject:
    """The body the model worker sends for ``transcript`` resumed with a new prompt: the normalizer's request,
    then the worker's params (``build_model_params``)."""
    messages = [parse_message(line) for line in _lines(transcript)]
    stored = to_api_request(messages, prompt="continue").request
    params = build_model_params(
        dict(stored),  # type: ignore[arg-type]
        session_id="s",
        config=SessionModelConfig(),
        defaults=ModelDefaults(model="claude-sonnet-4-6"),
        tools=[],
    )
    return request_body(params)


def _lines(transcript: bytes) -> list[JsonObject]:
    return [json.loads(line) for line in transcript.splitlines() if line.strip()]


def test_the_request_built_from_a_current_client_history_needs_the_clients_betas() -> None:
    body = sent_body(current_client_session())
    messages = body["messages"]
    assert isinstance(messages, list)
    assert any(isinstance(message, dict) and message.get("role") == "system" for message in messages)
    assert required_betas(body) == CLIENT_BETAS


def test_the_request_built_from_an_older_history_needs_none() -> None:
    body = sent_body(chat_session())
    assert required_betas(body) == []
