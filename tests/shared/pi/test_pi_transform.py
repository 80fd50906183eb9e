"""convertToLlm (P4.3, P4.4, P4.6) and transformMessages (P5), on the spec's own examples."""

from __future__ import annotations

import pytest

from agentbus_redis.pi.constants import (
    BRANCH_SUMMARY_PREFIX,
    COMPACTION_SUMMARY_PREFIX,
    COMPACTION_SUMMARY_SUFFIX,
    NO_RESULT_PROVIDED,
)
from agentbus_redis.pi.content import PiText, PiThinking, PiToolCall
from agentbus_redis.pi.convert import IMAGES_DISABLED, bash_execution_to_text, convert_to_llm
from agentbus_redis.pi.messages import (
    PiAssistantMessage,
    PiBashExecution,
    PiBranchSummary,
    PiCompactionSummary,
    PiCustomMessage,
    PiLlmMessage,
    PiToolResultMessage,
    PiUserMessage,
)
from agentbus_redis.pi.transform import PiTargetModel, normalize_anthropic_tool_call_id, transform_messages
from tests.shared.pi.builders import a, llm, tc, text, tr, u

TARGET = PiTargetModel(api="anthropic-messages", provider="anthropic", id="claude-opus-4-5")


def shape(messages: list[PiLlmMessage]) -> list[str]:
    """The spec's notation: U(x), A, TR id, TR* id (synthetic)."""
    out: list[str] = []
    for message in messages:
        if isinstance(message, PiUserMessage):
            first = message.content if isinstance(message.content, str) else message.content[0]
            out.append(f"U({first.text if isinstance(first, PiText) else first})")
        elif isinstance(message, PiAssistantMessage):
            out.append("A")
        else:
            texts = [block.text for block in message.content if isinstance(block, PiText)]
            star = "*" if texts == [NO_RESULT_PROVIDED] and message.details is None else ""
            out.append(f"TR{star} {message.tool_call_id}")
    return out


@pytest.mark.parametrize(
    ("bash", "expected"),
    [
        ({"command": "ls", "output": "a\nb", "exitCode": 0}, "Ran `ls`\n```\na\nb\n```"),
        ({"command": "false", "output": "", "exitCode": 1}, "Ran `false`\n(no output)\n\nCommand exited with code 1"),
        (
            {"command": "ls", "output": "", "cancelled": True, "exitCode": 130},
            "Ran `ls`\n(no output)\n\n(command cancelled)",
        ),
        (
            {"command": "ls", "output": "x", "truncated": True, "fullOutputPath": "/tmp/o.log"},
            "Ran `ls`\n```\nx\n```\n\n[Output truncated. Full output: /tmp/o.log]",
        ),
        ({"command": "ls", "output": "x", "truncated": True}, "Ran `ls`\n```\nx\n```"),
        ({"command": "ls", "output": "x", "exitCode": None}, "Ran `ls`\n```\nx\n```"),
    ],
)
def test_p4_4_bash_execution_to_text_examples(bash: dict[str, object], expected: str) -> None:
    assert bash_execution_to_text(PiBashExecution.model_validate(bash)) == expected


def test_p4_3_convert_to_llm_maps_every_kind() -> None:
    messages = [
        PiUserMessage(content="hi", timestamp=1),
        PiBashExecution(command="ls", output="", exit_code=0, timestamp=2),
        PiBashExecution(command="secret", output="", exclude_from_context=True, timestamp=3),
        PiCustomMessage(custom_type="ext", content="note", display=False, timestamp=4),
        PiBranchSummary(summary="B", from_id="x", timestamp=5),
        PiCompactionSummary(summary="C", tokens_before=10, timestamp=6),
    ]
    converted = convert_to_llm(messages)
    assert converted[0] is messages[0]  # unchanged, same object
    texts = [block.text for message in converted[1:] for block in message.content if isinstance(block, PiText)]
    assert texts == [
        "Ran `ls`\n(no output)",
        "note",  # display:false is still sent
        f"{BRANCH_SUMMARY_PREFIX}B</summary>",  # no newline before the branch suffix
        f"{COMPACTION_SUMMARY_PREFIX}C{COMPACTION_SUMMARY_SUFFIX}",
    ]
    assert BRANCH_SUMMARY_PREFIX.endswith("came back from:\n\n<summary>\n")
    assert [message.timestamp for message in converted] == [1, 2, 4, 5, 6]


def test_p4_6_blocked_images_become_one_text() -> None:
    image = {"type": "image", "data": "AAAA", "mimeType": "image/png"}
    message = llm({"role": "user", "content": [image, image, text("x")], "timestamp": 1})
    (blocked,) = convert_to_llm(message, images_blocked=True)
    assert isinstance(blocked.content, list)
    assert [block.text for block in blocked.content if isinstance(block, PiText)] == [IMAGES_DISABLED, "x"]


@pytest.mark.parametrize(
    ("name", "history", "expected"),
    [
        ("E1", [u("U"), a(tc("t1"), tc("t2")), tr("t1"), u("U2")], ["U(U)", "A", "TR t1", "TR* t2", "U(U2)"]),
        ("E2", [u("U"), a(tc("t1")), a(text("x"), stop="stop")], ["U(U)", "A", "TR* t1", "A"]),
        ("E3", [u("U"), a(tc("t1"))], ["U(U)", "A"]),
        ("E4", [u("U"), a(text("part"), tc("t1"), stop="aborted"), u("U2")], ["U(U)", "U(U2)"]),
        ("E5", [u("U"), a(tc("t1")), a(stop="aborted"), u("U2")], ["U(U)", "A", "TR* t1", "U(U2)"]),
        ("E6", [u("U"), a(tc("t1"), stop="error"), tr("t1"), u("U2")], ["U(U)", "TR t1", "U(U2)"]),
        (
            "E7",
            [u("U"), a(tc("X")), u("bash"), tr("X"), a(text("x"), stop="stop")],
            ["U(U)", "A", "TR* X", "U(bash)", "TR X", "A"],
        ),
        ("E8", [u("U"), tr("z"), u("U2")], ["U(U)", "TR z", "U(U2)"]),
        ("E9", [u("U"), a(tc("t1")), tr("t1"), tr("t1")], ["U(U)", "A", "TR t1", "TR t1"]),
    ],
)
def test_p5_9_transform_messages_examples(name: str, history: list[dict[str, object]], expected: list[str]) -> None:
    assert shape(transform_messages(llm(*history), TARGET, now_ms=7)) == expected, name


def test_p5_7_synthetic_result_is_exact() -> None:
    result = transform_messages(llm(u(), a(tc("t1", name="read")), u("next")), TARGET, now_ms=99)[2]
    assert isinstance(result, PiToolResultMessage)
    assert result.to_wire() == {
        "role": "toolResult",
        "toolCallId": "t1",
        "toolName": "read",
        "content": [{"type": "text", "text": "No result provided"}],
        "isError": True,
        "timestamp": 99,
    }


def test_p5_9_e10_other_model_thinking_text_and_ids() -> None:
    other = {"api": "openai-responses", "provider": "openai", "model": "gpt-5"}
    call = tc("call_abc|fc_xyz+/=") | {"thoughtSignature": "x"}
    assistant = a(
        {"type": "thinking", "thinking": "plan", "thinkingSignature": "{…}"},
        {"type": "text", "text": "ok", "textSignature": "msg_1"},
        call,
        **other,
    )
    out = transform_messages(llm(u(), assistant, tr("call_abc|fc_xyz+/=")), TARGET, normalize_anthropic_tool_call_id)
    rewritten, result = out[1], out[2]
    assert isinstance(rewritten, PiAssistantMessage)
    assert [block.to_wire() for block in rewritten.content] == [
        {"type": "text", "text": "plan"},
        {"type": "text", "text": "ok"},
        {"type": "toolCall", "id": "call_abc_fc_xyz___", "name": "bash", "arguments": {"command": "ls"}},
    ]
    assert isinstance(result, PiToolResultMessage)
    assert result.tool_call_id == "call_abc_fc_xyz___"


def test_p5_9_e11_to_e13_same_model_thinking() -> None:
    signed_empty = a({"type": "thinking", "thinking": "", "thinkingSignature": "sig"}, text("a"), stop="stop")
    (out,) = transform_messages(llm(signed_empty), TARGET)
    assert isinstance(out, PiAssistantMessage)
    assert len(out.content) == 2  # E11: signed empty thinking kept

    blank_and_unsigned = a(
        {"type": "thinking", "thinking": "   ", "thinkingSignature": ""},
        {"type": "thinking", "thinking": "unsigned", "thinkingSignature": ""},
        text("t"),
        stop="stop",
    )
    (out,) = transform_messages(llm(blank_and_unsigned), TARGET)
    assert isinstance(out, PiAssistantMessage)
    assert [block.thinking for block in out.content if isinstance(block, PiThinking)] == ["unsigned"]  # E12

    redacted = {"type": "thinking", "thinking": "[Reasoning redacted]", "thinkingSignature": "DATA", "redacted": True}
    (same,) = transform_messages(llm(a(redacted, stop="stop")), TARGET)
    other = PiTargetModel(api="anthropic-messages", provider="anthropic", id="claude-sonnet-4-5")
    (moved,) = transform_messages(llm(a(redacted, stop="stop")), other)
    assert isinstance(same, PiAssistantMessage)
    assert isinstance(moved, PiAssistantMessage)
    assert len(same.content) == 1  # E13: same model keeps it
    assert moved.content == []  # another model drops it


def test_p5_5_same_model_tool_calls_are_never_normalised() -> None:
    out = transform_messages(llm(a(tc("a|b"))), TARGET, normalize_anthropic_tool_call_id)
    assert isinstance(out[0], PiAssistantMessage)
    call = out[0].content[0]
    assert isinstance(call, PiToolCall)
    assert call.id == "a|b"


def test_p5_5_anthropic_normaliser() -> None:
    assert normalize_anthropic_tool_call_id("a|b+c" + "x" * 100) == ("a_b_c" + "x" * 100)[:64]
