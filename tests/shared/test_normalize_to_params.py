"""Conversion of normalized messages to Messages API params."""

from __future__ import annotations

from agentbus_redis.json_types import JsonObject
from agentbus_redis.messages.kinds import parse_message
from agentbus_redis.normalize import message_to_param, to_messages_request
from tests.shared.normalize_builders import assistant, text, thinking, tool_result, tool_use, user


def test_to_params_user_string_and_blocks() -> None:
    """A user message keeps string content as a string; block content is dumped with ``to_wire``."""
    assert message_to_param(user("hi")) == {"role": "user", "content": "hi"}
    assert message_to_param(user([tool_result("t1", "ok", is_error=False), text("x")])) == {
        "role": "user",
        "content": [
            {"type": "tool_result", "tool_use_id": "t1", "content": "ok", "is_error": False},
            {"type": "text", "text": "x"},
        ],
    }


def test_to_params_assistant_is_always_a_list_and_thinking_byte_identical() -> None:
    """Assistant content is always a list (an old string content becomes one text block); thinking
    text and signature are dumped exactly as read (key order is the model's, which JSON ignores)."""
    raw: JsonObject = {
        "type": "assistant",
        "uuid": "u1",
        "timestamp": "2026-01-01T00:00:00.000Z",
        "message": {
            "id": "msg_1",
            "role": "assistant",
            "model": "m",
            "content": [{"signature": "EqQB/sig==", "thinking": "why\n", "type": "thinking"}],
        },
    }
    parsed = parse_message(raw)
    param = message_to_param(parsed)  # type: ignore[arg-type]
    assert param == {
        "role": "assistant",
        "content": [{"signature": "EqQB/sig==", "thinking": "why\n", "type": "thinking"}],
    }
    payload = raw["message"]
    assert isinstance(payload, dict)
    old = parse_message({**raw, "message": {**payload, "content": "plain"}})
    assert message_to_param(old)["content"] == [{"type": "text", "text": "plain"}]  # type: ignore[arg-type]


def test_r4_7_tool_use_param_exact_keys_without_tool_search() -> None:
    """R4.7: with tool search off a tool_use param is exactly ``{type, id, name, input}``."""
    block = tool_use("t1", "Bash", {"command": "ls"}, caller={"type": "direct"})
    assert message_to_param(assistant(block))["content"] == [
        {"type": "tool_use", "id": "t1", "name": "Bash", "input": {"command": "ls"}}
    ]
    with_search = message_to_param(assistant(block), tool_search_enabled=True)["content"]
    assert with_search == [
        {"type": "tool_use", "id": "t1", "name": "Bash", "input": {"command": "ls"}, "caller": {"type": "direct"}}
    ]


def test_to_messages_request_body() -> None:
    """The body holds ``messages`` (and ``model`` when the target model is known)."""
    body = to_messages_request([user("q"), assistant(thinking("t", "s"), text("a"))], model="claude-sonnet-4-5")
    assert body["model"] == "claude-sonnet-4-5"
    assert [m["role"] for m in body["messages"]] == ["user", "assistant"]
    assert "model" not in to_messages_request([user("q")])
