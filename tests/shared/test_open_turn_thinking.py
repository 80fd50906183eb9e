"""Thinking in the open turn of a tool loop (anthropic-api-rules.md §1.10, agent-loop.md M1.6, M6.3 step 4,
M6.6; claude-code-messages.md R4.14, R4.15): the normalization worker keeps the open turn's signed thinking
(``NormalizeOptions(thinking_enabled=None)``), the model worker fits ``thinking`` to it
(``build_model_params``), and whatever the history the request sent breaks no rule of the validator."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from agentbus_redis.api.validation import validate_api_request
from agentbus_redis.clock import FixedClock
from agentbus_redis.ids import SequentialIds
from agentbus_redis.json_types import JsonObject
from agentbus_redis.messages.content import RedactedThinkingBlock
from agentbus_redis.messages.kinds import Message, TombstoneMessage
from agentbus_redis.model.request import ModelDefaults, build_model_params, request_body
from agentbus_redis.model.session_config import SessionModelConfig
from agentbus_redis.normalize import NormalizeOptions, RepairKind, to_api_request, validate_request
from agentbus_redis.normalize.thinking_models import open_turn_thinking_models
from tests.shared.normalize_builders import assistant, text, thinking, tool_result, tool_use, user
from tests.shared.test_normalize_pipeline import _messages

SENDER_FITS_THINKING = NormalizeOptions(thinking_enabled=None)
SONNET = "claude-sonnet-4-5"
HAIKU = "claude-haiku-4-5"
SIGNED = thinking("Let me check the files first.\nThen count them: “ü” \\u00fc", "EqQBCkYIBxgCKkD+/=")
REDACTED = RedactedThinkingBlock(data="EmwKAhgBEgy3va3pzix/LafPsn4aDFIT2Xlxh0L5L8rLVyIwxtE3rAFBa8cr3qpP")


def _request(history: list[Message], options: NormalizeOptions = SENDER_FITS_THINKING) -> Any:
    """The request body as the normalization worker stores it (plain JSON)."""
    result = to_api_request(history, options=options, clock=FixedClock(), ids=SequentialIds(500))
    assert validate_request(result.request, options=options) == []
    return json.loads(json.dumps(result.request))


def _loop(model: str = SONNET) -> list[Message]:
    """A turn in a tool loop: the first reply (split over three lines, R9) thought, then called a tool."""
    return [
        user("count the files"),
        assistant(SIGNED, msg_id="msg_1", model=model),
        assistant(REDACTED, msg_id="msg_1", model=model),
        assistant(text("Counting."), tool_use("toolu_1"), msg_id="msg_1", model=model),
        user([tool_result("toolu_1", "3")]),
    ]


def _send(
    request: JsonObject, *, model: str = SONNET, thinking: JsonObject | None = None, signers: Sequence[str] = ()
) -> Any:
    """The JSON body the model worker sends for ``request``."""
    params = build_model_params(
        request,
        session_id="s1",
        config=SessionModelConfig(model=model, thinking=thinking),
        defaults=ModelDefaults(model=SONNET),
        tools=[],
        thinking_models=list(signers),
    )
    return json.loads(json.dumps(request_body(params)))


def test_api_1_10_open_turn_thinking_kept_byte_identical_for_the_sender() -> None:
    """The last assistant turn's thinking and redacted_thinking reach the request as returned, merged back
    in stream order (R4.7), so the second call of the loop can send them ("cannot be modified")."""
    messages = _request(_loop())["messages"]
    assert messages[1]["content"] == [
        SIGNED.to_wire(),
        REDACTED.to_wire(),
        {"type": "text", "text": "Counting."},
        {"type": "tool_use", "id": "toolu_1", "name": "Bash", "input": {}},
    ]
    stripped = _request(_loop(), NormalizeOptions())["messages"]  # the default: no thinking config
    assert [block["type"] for block in stripped[1]["content"]] == ["text", "tool_use"]


def test_api_1_10_sender_thinking_on_sends_thinking_and_the_blocks() -> None:
    body = _send(_request(_loop()))
    assert body["thinking"] == {"type": "enabled", "budget_tokens": 31_999}
    assert body["messages"][1]["content"][:2] == [SIGNED.to_wire(), REDACTED.to_wire()]
    assert validate_api_request(body) == []  # enabled: the open turn starts with thinking


def test_api_1_10_sender_thinking_off_strips_the_open_turn() -> None:
    body = _send(_request(_loop()), thinking={"type": "disabled"})
    assert "thinking" not in body
    assert [block["type"] for block in body["messages"][1]["content"]] == ["text", "tool_use"]
    assert validate_api_request(body) == []  # disabled: no thinking in the final position


def test_api_1_10_unsigned_and_placeholder_thinking_never_replayed() -> None:
    """An aborted stream's unsigned block or an exporter's placeholder fails the signature check: dropped
    even in the sender mode; the loop then goes without thinking (the turn no longer starts with it)."""
    history = _loop()
    history[1] = assistant(thinking("half a thought", None), msg_id="msg_1")
    history[2] = assistant(thinking("redacted", "[REDACTED_SIGNATURE]"), msg_id="msg_1")
    result = to_api_request(history, options=SENDER_FITS_THINKING, clock=FixedClock(), ids=SequentialIds())
    request = json.loads(json.dumps(result.request))
    assert [block["type"] for block in request["messages"][1]["content"]] == ["text", "tool_use"]
    assert result.report.counts[RepairKind.THINKING_DROPPED] == 2
    assert "thinking" not in _send(request)


def test_r4_14_r4_15_orphan_and_trailing_thinking_rules_hold_in_the_sender_mode() -> None:
    """R4.14: a thinking-only message with no sibling of its message.id is dropped; R4.15: a final
    assistant loses its trailing thinking — whatever the thinking mode."""
    orphan: list[Message] = [user("q"), assistant(SIGNED, msg_id="msg_orphan"), user("next")]
    assert [m["role"] for m in _request(orphan)["messages"]] == ["user"]
    trailing: list[Message] = [user("q"), assistant(text("partial"), SIGNED, msg_id="msg_2")]
    result = to_api_request(trailing, options=SENDER_FITS_THINKING, clock=FixedClock(), ids=SequentialIds())
    assert result.request["messages"][-1]["content"] == [{"type": "text", "text": "partial"}]


def test_m6_3_thinking_models_of_the_open_turn() -> None:
    """After a fallback switch the open turn holds thinking of both models; a tombstoned partial and
    earlier turns count for nothing; a new prompt empties the open turn."""
    history = _loop()
    partial = assistant(thinking("retracted", "sig-r"), msg_id="msg_x", model="claude-opus-4-1")
    history += [partial, TombstoneMessage(message=partial)]
    history += [assistant(thinking("on the fallback", "sig-f"), tool_use("toolu_2"), msg_id="msg_2", model=HAIKU)]
    history += [user([tool_result("toolu_2", "ok")])]
    assert open_turn_thinking_models(history) == [HAIKU, SONNET]
    assert open_turn_thinking_models([*history, assistant(text("done")), user("next")]) == []


def test_m6_6_thinking_of_another_model_is_never_replayed() -> None:
    """The loop continues on the fallback model (M6.3.1): the open turn's thinking signed by the primary
    model is stripped, and with it the loop goes on without thinking (API §1.10)."""
    history = _loop()
    request = _request(history)
    signers = open_turn_thinking_models(history)
    on_fallback = _send(request, model=HAIKU, signers=signers)
    assert "thinking" not in on_fallback
    assert all(
        block["type"] not in ("thinking", "redacted_thinking") for block in on_fallback["messages"][1]["content"]
    )
    assert validate_api_request(on_fallback) == []
    same = _send(request, model=f"{SONNET}-20250929", signers=signers)  # a dated snapshot is the same model
    assert same["messages"][1]["content"][0] == SIGNED.to_wire()


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    history=st.lists(_messages, max_size=8),
    prompt=st.sampled_from([None, "continue"]),
    model=st.sampled_from([SONNET, "claude-opus-4-1", "claude-sonnet-4-6", "claude-3-5-haiku-20241022"]),
    thinking_config=st.sampled_from([None, {"type": "disabled"}]),
)
def test_api_1_10_whatever_the_history_the_request_sent_is_valid(
    history: list[Message], prompt: str | None, model: str, thinking_config: JsonObject | None
) -> None:
    """The normalization worker's request, fitted by the model worker, breaks no rule of the validator in
    the thinking mode it is sent with (an adaptive request is checked as enabled: the model may think)."""
    result = to_api_request(
        history, options=SENDER_FITS_THINKING, prompt=prompt, clock=FixedClock(), ids=SequentialIds()
    )
    body = _send(
        json.loads(json.dumps(result.request)),
        model=model,
        thinking=thinking_config,
        signers=open_turn_thinking_models(history),
    )
    enabled = "thinking" in body
    assert validate_api_request(body, thinking_enabled=enabled, allow_prefill=prompt is None) == [], body
