"""How ``agentbus chat`` renders a turn (cli/chat.py): text as it streams, one ``⏺ Tool(arg)`` line
per call with its outcome under it (named when parallel calls were printed since), errors on stderr."""

from __future__ import annotations

import io

from agentbus_redis.bus.conversation import (
    ApiError,
    ApiRetry,
    AssistantMessageComplete,
    ConversationEvent,
    Interrupted,
    TaskNotification,
    TaskProgress,
    TaskStarted,
    TextDelta,
    ThinkingDelta,
    ToolCall,
    ToolResult,
    TurnEnd,
)
from agentbus_redis.cli.chat import TurnPrinter, exit_code


def render(events: list[ConversationEvent], *, show_thinking: bool = False) -> tuple[str, str]:
    out, err = io.StringIO(), io.StringIO()
    printer = TurnPrinter(out, err, show_thinking=show_thinking)
    for event in events:
        printer.show(event)
    return out.getvalue(), err.getvalue()


def done(text: str) -> AssistantMessageComplete:
    return AssistantMessageComplete(uuid="u", message_id="m", text=text, stop_reason=None)


def test_text_streams_and_each_call_gets_its_line_and_outcome() -> None:
    out, err = render(
        [
            ThinkingDelta(text="hidden"),
            TextDelta(text="Reading "),
            TextDelta(text="both."),
            done("Reading both."),
            ToolCall(tool_use_id="a", name="Read", input={"file_path": "a.txt"}, summary="a.txt"),
            ToolCall(tool_use_id="b", name="Read", input={"file_path": "b.txt"}, summary="b.txt"),
            ToolResult(tool_use_id="b", name="Read", ok=True, first_line="beta"),
            ToolResult(tool_use_id="a", name="Read", ok=False, first_line="File does not exist."),
            TextDelta(text="Done."),
            TurnEnd(stop_reason="end_turn"),
        ]
    )
    assert out == (
        "Reading both.\n⏺ Read(a.txt)\n⏺ Read(b.txt)\n  ⎿  beta\n  ⎿  Read(a.txt): Error: File does not exist.\nDone.\n"
    )
    assert err == ""


def test_errors_retries_and_interrupts_go_to_stderr_one_line_each() -> None:
    out, err = render(
        [
            ApiRetry(text="API error (529)", retry_in_ms=2000, attempt=1, max_retries=10),
            TextDelta(text="par"),
            Interrupted(text="[Request interrupted by user]"),
            ApiError(text="API Error: 500\n{...}", error="server_error"),
        ]
    )
    assert out == "par\n"
    assert err.splitlines() == [
        "  ⎿  API error (529) · retrying in 2.0s (attempt 1/10)",
        "  ⎿  Interrupted by user",
        "agentbus: API Error: 500 {...}",
    ]


def test_thinking_is_shown_on_request() -> None:
    assert render([ThinkingDelta(text="Hmm.")], show_thinking=True)[0] == "Hmm."


def test_exit_codes() -> None:
    assert exit_code(TurnEnd(stop_reason="end_turn")) == 0
    assert exit_code(TurnEnd(stop_reason="api_error", error="API Error: x")) == 1
    assert exit_code(TurnEnd(stop_reason="max_tokens", error="API Error: y")) == 1
    assert exit_code(TurnEnd(stop_reason="interrupted")) == 130
    assert exit_code(None) == 130


def test_a6_3_a_sub_agents_tool_calls_show_under_its_agent_call_and_a3_8_max_turns_is_said() -> None:
    usage = {"total_tokens": 120, "tool_uses": 1, "duration_ms": 900}
    ids = {"task_id": "a0123456789abcdef", "tool_use_id": "t"}
    out, err = render(
        [
            ToolCall(tool_use_id="t", name="Agent", input={}, summary="read the readme"),
            TaskStarted(**ids, description="read the readme", task_type="local_agent", prompt="Read it."),
            TaskProgress(**ids, description="read the readme", usage=usage, last_tool_name="Read"),
            TaskNotification(**ids, status="completed", summary="read the readme", usage=usage),
            ToolResult(tool_use_id="t", name="Agent", ok=True, first_line="README says hi"),
            TurnEnd(stop_reason="max_turns"),
        ]
    )
    assert out == ("⏺ Agent(read the readme)\n  ⎿  read the readme · Read (1 tool use)\n  ⎿  README says hi\n")
    assert err == "  ⎿  Stopped: the session's max turns were reached\n"
