"""Pure rules of background sub-agents and SendMessage (agent-loop.md A1.2, A3.4, A4.4, A5.3, A5.4, A9) and
the queued prompt that delivers a task notification (bus/queued_prompts.py)."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from agentbus_redis.agents.background import (
    BACKGROUND_TOOLS,
    TASK_NOTIFICATION_ORIGIN,
    async_launched_text,
    background_tools,
    background_usage,
    caller_can_read_output,
    output_file_path,
    summary_text,
    task_notification,
)
from agentbus_redis.agents.definitions import GENERAL_PURPOSE_AGENT, child_tools
from agentbus_redis.agents.send_message import SendMessageInput, send_message_tool_definition
from agentbus_redis.agents.tool import RUN_IN_BACKGROUND_FIELD, agent_tool_definition
from agentbus_redis.agents.turn import turn_outcome
from agentbus_redis.bus.events import (
    AssistantReply,
    IngressEnvelope,
    IngressPayload,
    Interrupt,
    ToolResultReport,
    UserPrompt,
)
from agentbus_redis.bus.ledger import LedgerOutput, SessionLedger, new_ledger_state
from agentbus_redis.clock import FixedClock
from agentbus_redis.ids import SequentialIds
from agentbus_redis.messages.content import TextBlock, ToolResultBlock, ToolUseBlock
from agentbus_redis.messages.factories import create_assistant_message, create_user_message
from agentbus_redis.messages.kinds import AssistantMessage, Message, UserMessage

AGENT = "a0123456789abcdef"
OUTPUT = "/work/.agentbus/tasks/a0123456789abcdef.output"


def reply(
    content: str | list[object], *, usage: dict[str, int] | None = None, msg_id: str | None = None
) -> AssistantMessage:
    message = create_assistant_message(content)  # type: ignore[arg-type]
    update: dict[str, object] = {"stop_reason": "tool_use" if isinstance(content, list) else "end_turn"}
    if usage is not None:
        update["usage"] = usage
    if msg_id is not None:
        update["id"] = msg_id
    return message.model_copy(update={"message": message.message.model_copy(update=update)})


# -- A1.2 / A9 the schema field -----------------------------------------------------------------------


def test_a1_2_run_in_background_is_in_the_schema_unless_background_tasks_are_disabled() -> None:
    enabled = agent_tool_definition([GENERAL_PURPOSE_AGENT])
    disabled = agent_tool_definition([GENERAL_PURPOSE_AGENT], background=False)
    properties = enabled.input_schema["properties"]
    assert isinstance(properties, dict)
    assert properties["run_in_background"] == {"type": "boolean", "description": RUN_IN_BACKGROUND_FIELD["description"]}
    assert "run_in_background" not in disabled.input_schema["properties"]  # type: ignore[operator]


# -- A3.4 restricted tools --------------------------------------------------------------------------


def test_a3_4_background_children_keep_only_the_restricted_tools() -> None:
    pool = ["Agent", "Bash", "Read", "SendMessage", "AskUserQuestion", "Glob", "WebFetch", "TaskStop", "mcp__x"]
    tools, _ = child_tools(GENERAL_PURPOSE_AGENT, pool)
    assert background_tools(tools) == ["Bash", "Read", "Glob", "WebFetch"]
    assert {"Read", "Bash", "Edit", "Write", "Grep", "Glob", "WebFetch", "WebSearch", "TodoWrite"} <= BACKGROUND_TOOLS


# -- A5.3 the launch text ---------------------------------------------------------------------------


def test_a5_3_launch_text_with_output_file_when_the_caller_can_read() -> None:
    assert output_file_path("/work/", AGENT) == OUTPUT
    assert caller_can_read_output(["Glob", "Bash"])
    assert not caller_can_read_output(["Glob"])
    assert async_launched_text(AGENT, output_file=OUTPUT, caller_can_read=True) == (
        "Async agent launched successfully.\n"
        "agentId: a0123456789abcdef (internal ID - do not mention to user. Use SendMessage with to: "
        "'a0123456789abcdef' to continue this agent.)\n"
        "The agent is working in the background. You will be notified automatically when it completes.\n"
        "Do not duplicate this agent's work — avoid working with the same files or topics it is using. Work on "
        "non-overlapping tasks, or briefly tell the user what you launched and end your response.\n"
        "output_file: /work/.agentbus/tasks/a0123456789abcdef.output\n"
        "If asked, you can check progress before completion by using Read or Bash tail on the output file."
    )


def test_a5_3_launch_text_without_read_or_bash() -> None:
    text = async_launched_text(AGENT, output_file=OUTPUT, caller_can_read=False)
    assert text.endswith(
        "You will be notified automatically when it completes.\n"
        "Briefly tell the user what you launched and end your response. Do not generate any other text — agent "
        "results will arrive in a subsequent message."
    )
    assert "output_file" not in text


# -- A5.4 the notification --------------------------------------------------------------------------


def test_a5_4_summary_texts() -> None:
    assert summary_text("scan", "completed") == 'Agent "scan" completed'
    assert summary_text("scan", "failed", "boom") == 'Agent "scan" failed: boom'
    assert summary_text("scan", "failed") == 'Agent "scan" failed: Unknown error'
    assert summary_text("scan", "killed") == 'Agent "scan" was stopped'


def test_a5_4_total_tokens_are_the_latest_input_side_plus_cumulative_output() -> None:
    messages: list[UserMessage | AssistantMessage] = [
        create_user_message("go"),
        reply(
            [ToolUseBlock(id="t1", name="Read", input={})],
            usage={"input_tokens": 100, "output_tokens": 10},
            msg_id="m1",
        ),
        reply(
            "done",
            usage={"input_tokens": 150, "cache_read_input_tokens": 50, "output_tokens": 20},
            msg_id="m2",
        ),
    ]
    usage = background_usage(messages, duration_ms=7)
    assert (usage.total_tokens, usage.tool_uses, usage.duration_ms) == (150 + 50 + 10 + 20, 1, 7)


def test_a5_4_exact_notification_format() -> None:
    messages: list[UserMessage | AssistantMessage] = [
        create_user_message("go"),
        reply("Found 3 call sites.", usage={"input_tokens": 40, "output_tokens": 2}),
    ]
    notification = task_notification(
        agent_id=AGENT,
        tool_use_id="toolu_1",
        description="scan",
        output_file=OUTPUT,
        status="completed",
        messages=messages,
        duration_ms=1234,
    )
    assert notification.render() == (
        "<task-notification>\n"
        "<task-id>a0123456789abcdef</task-id>\n"
        "<tool-use-id>toolu_1</tool-use-id>\n"
        "<output-file>/work/.agentbus/tasks/a0123456789abcdef.output</output-file>\n"
        "<status>completed</status>\n"
        '<summary>Agent "scan" completed</summary>\n'
        "<result>Found 3 call sites.</result>\n"
        "<usage><total_tokens>42</total_tokens><tool_uses>0</tool_uses><duration_ms>1234</duration_ms></usage>\n"
        "</task-notification>"
    )
    assert TASK_NOTIFICATION_ORIGIN == {"kind": "task-notification"}


def test_a8_3_a_killed_child_notifies_its_partial_result_and_no_result_when_it_said_nothing() -> None:
    partial: list[UserMessage | AssistantMessage] = [
        create_user_message("go"),
        reply([TextBlock(text="Halfway."), ToolUseBlock(id="t1", name="Bash", input={"command": "sleep 9"})]),
    ]
    killed = task_notification(
        agent_id=AGENT,
        tool_use_id=None,
        description="scan",
        output_file=OUTPUT,
        status="killed",
        messages=partial,
        duration_ms=5,
    ).render()
    assert "<tool-use-id>" not in killed
    assert '<status>killed</status>\n<summary>Agent "scan" was stopped</summary>\n<result>Halfway.</result>' in killed
    silent = task_notification(
        agent_id=AGENT,
        tool_use_id="t",
        description="scan",
        output_file=OUTPUT,
        status="failed",
        messages=[create_user_message("go")],
        duration_ms=5,
        error="limit",
    ).render()
    assert "<result>" not in silent
    assert '<summary>Agent "scan" failed: limit</summary>' in silent


# -- A4.4 SendMessage -------------------------------------------------------------------------------


def test_a4_4_send_message_input_is_to_and_message() -> None:
    assert SendMessageInput.model_validate({"to": AGENT, "message": "more"}).to == AGENT
    with pytest.raises(ValidationError):
        SendMessageInput.model_validate({"to": AGENT})
    with pytest.raises(ValidationError):
        SendMessageInput.model_validate({"to": AGENT, "message": "x", "summary": "y"})
    definition = send_message_tool_definition()
    assert (definition.name, definition.input_schema["required"]) == ("SendMessage", ["to", "message"])


def test_a4_4_a_rounds_outcome_counts_from_its_prompt_on() -> None:
    first: list[Message] = [create_user_message("one", uuid="p1"), reply("first answer")]
    assert turn_outcome(first).state == "completed"
    # The round's prompt is not logged yet: the old answer does not end the new round.
    assert turn_outcome(first, since_uuid="p2").state == "running"
    second = [*first, create_user_message("two", uuid="p2")]
    assert turn_outcome(second, since_uuid="p2").state == "running"
    done = turn_outcome([*second, reply("second answer")], since_uuid="p2")
    assert done.state == "completed"
    assert [m.uuid for m in done.messages] == ["p2", done.messages[1].uuid]


# -- queued prompts (A5.4 "seen by the parent's next turn") -------------------------------------------


@pytest.fixture
def ledger() -> SessionLedger:
    return SessionLedger(new_ledger_state("s1"), tool_deadline_ms=1000, clock=FixedClock(), ids=SequentialIds(100))


def send(ledger: SessionLedger, payload: IngressPayload) -> LedgerOutput:
    return ledger.apply(IngressEnvelope(session_id="s1", idempotency_key="k", payload=payload), now_ms=0)


def notification(text: str = "<task-notification>…</task-notification>") -> UserPrompt:
    return UserPrompt(content=text, origin=dict(TASK_NOTIFICATION_ORIGIN), queued=True)


def texts(out: LedgerOutput) -> list[str]:
    return [e.message.message.content for e in out.entries if isinstance(e.message, UserMessage)]  # type: ignore[misc]


def test_a5_4_a_queued_prompt_to_an_idle_session_is_logged_at_once(ledger: SessionLedger) -> None:
    out = send(ledger, notification())
    assert texts(out) == ["<task-notification>…</task-notification>"]
    assert out.entries[0].message.origin == {"kind": "task-notification"}  # type: ignore[union-attr]


def test_a5_4_a_queued_prompt_waits_until_the_turn_is_over(ledger: SessionLedger) -> None:
    send(ledger, UserPrompt(content="work"))
    assert send(ledger, notification("n1")).entries == []  # the model is due: held
    call = reply([ToolUseBlock(id="t1", name="Read", input={"file_path": "x"})])
    assert [e.message.type for e in send(ledger, AssistantReply(message=call)).entries] == ["assistant"]
    assert send(ledger, notification("n2")).entries == []  # a tool runs: held
    result = create_user_message(
        [ToolResultBlock(tool_use_id="t1", content="ok")], source_tool_assistant_uuid=call.uuid
    )
    assert texts(send(ledger, ToolResultReport(message=result))) == [[ToolResultBlock(tool_use_id="t1", content="ok")]]  # type: ignore[comparison-overlap]
    out = send(ledger, AssistantReply(message=reply("all done")))
    # The reply ended the turn: both notifications follow it, in order (the next turn starts with them).
    assert [e.message.type for e in out.entries] == ["assistant", "user", "user"]
    assert texts(out) == ["n1", "n2"]
    assert out.entries[1].message.parent_uuid == out.entries[0].message.uuid  # type: ignore[union-attr]
    assert ledger.state.turn_open


def test_a5_4_held_notifications_go_along_with_the_next_prompt_or_after_an_interrupt(ledger: SessionLedger) -> None:
    send(ledger, UserPrompt(content="work"))
    send(ledger, notification("n1"))
    assert texts(send(ledger, UserPrompt(content="next"))) == ["n1", "next"]
    send(ledger, notification("n2"))
    send(ledger, AssistantReply(message=reply([ToolUseBlock(id="t9", name="Bash", input={"command": "x"})])))
    send(ledger, Interrupt())  # R10.2: the tool is answered, then the interruption text ends the turn
    result = create_user_message([ToolResultBlock(tool_use_id="t9", content="stopped", is_error=True)])
    out = send(ledger, ToolResultReport(message=result))
    assert texts(out)[-1] == "n2"
