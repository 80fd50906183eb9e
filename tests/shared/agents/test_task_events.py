"""A6.3 SDK task events of a sub-agent (agents/task_events.py): their exact shapes, when they are
due, and that they stay SDK-only — out of the Messages API request, the transcript and the parent chain —
while a watcher (``bus.converse``) and ``agentbus tail`` see them typed."""

from __future__ import annotations

from agentbus_redis.agents.record import ChildRecord
from agentbus_redis.agents.task_events import last_tool_use, task_notification, task_progress, task_started, task_usage
from agentbus_redis.bus.conversation import TaskNotification, TaskProgress, TaskStarted, TurnTracker
from agentbus_redis.bus.events import IngressEnvelope, LogEntry, SystemNotice
from agentbus_redis.bus.internal_events import forged_internal_problem
from agentbus_redis.bus.ledger import SessionLedger, new_ledger_state
from agentbus_redis.bus.session_history import SessionHistory
from agentbus_redis.cli.bus import describe
from agentbus_redis.json_types import JsonObject
from agentbus_redis.messages.chain_cursor import ChainCursor
from agentbus_redis.messages.content import TextBlock, ToolResultBlock, ToolUseBlock
from agentbus_redis.messages.factories import create_assistant_message, create_user_message
from agentbus_redis.messages.kinds import AssistantMessage, Message, UserMessage, parse_message
from agentbus_redis.messages.system import TaskStartedSystemMessage, TaskSystemMessage, is_sdk_only
from agentbus_redis.normalize import to_api_request
from agentbus_redis.transcript_files.cleaning import CleaningPolicy, clean_messages_for_logging

NOW = "2026-01-01T00:00:00Z"
RECORD = ChildRecord(
    session_id="p:agent-a0123456789abcdef",
    parent_session_id="p",
    parent_tool_use_id="toolu_1",
    parent_assistant_uuid="pa-1",
    agent_id="a0123456789abcdef",
    agent_type="general-purpose",
    description="read the readme",
    prompt="Read README.md",
    dispatched_ms=1_000,
    started_ms=1_000,
    deadline_ms=600_000,
    depth=1,
)


def reply(*blocks: TextBlock | ToolUseBlock, message_id: str, usage: JsonObject | None = None) -> AssistantMessage:
    message = create_assistant_message(list(blocks))
    payload = message.message.model_copy(update={"id": message_id, "usage": usage})
    return message.model_copy(update={"message": payload})


def test_a6_3_task_started_shape() -> None:
    assert task_started(RECORD, timestamp=NOW).to_wire() == {
        "uuid": task_started(RECORD, timestamp="later").uuid,  # derived from the call: stable
        "timestamp": NOW,
        "type": "system",
        "subtype": "task_started",
        "task_id": "a0123456789abcdef",
        "tool_use_id": "toolu_1",
        "description": "read the readme",
        "task_type": "local_agent",
        "prompt": "Read README.md",
    }


def test_a6_3_task_progress_after_a_message_ending_with_tool_use_with_usage_and_last_tool_name() -> None:
    read = ToolUseBlock(id="t1", name="Read", input={})
    first = reply(TextBlock(text="Looking."), read, message_id="m1", usage={"input_tokens": 100, "output_tokens": 20})
    grep = ToolUseBlock(id="t2", name="Grep", input={})
    second = reply(
        grep, message_id="m2", usage={"input_tokens": 150, "cache_read_input_tokens": 50, "output_tokens": 5}
    )
    assert last_tool_use(first) == read
    assert last_tool_use(reply(read, TextBlock(text="after"), message_id="m3")) is None
    assert last_tool_use(create_user_message("hi")) is None
    messages: list[UserMessage | AssistantMessage] = [
        create_user_message("go"),
        first,
        create_user_message([ToolResultBlock(tool_use_id="t1", content="x")]),
        second,
    ]
    usage = task_usage(messages, started_ms=1_000, now_ms=4_500)
    # The latest reply's input side (150 + 50) plus every reply's output (20 + 5).
    assert usage == {"total_tokens": 225, "tool_uses": 2, "duration_ms": 3_500}
    wire = task_progress(RECORD, second, grep, usage=usage, timestamp=NOW).to_wire()
    assert {
        key: wire[key] for key in ("subtype", "task_id", "tool_use_id", "description", "usage", "last_tool_name")
    } == {
        "subtype": "task_progress",
        "task_id": "a0123456789abcdef",
        "tool_use_id": "toolu_1",
        "description": "read the readme",
        "usage": usage,
        "last_tool_name": "Grep",
    }


def test_a6_3_task_notification_status_completed_failed_or_stopped() -> None:
    usage: JsonObject = {"total_tokens": 1, "tool_uses": 0, "duration_ms": 5}
    statuses = [
        task_notification(RECORD, status, usage=usage, timestamp=NOW).status
        for status in ("completed", "failed", "interrupted")
    ]
    assert statuses == ["completed", "failed", "stopped"]
    wire = task_notification(RECORD, "completed", usage=usage, timestamp=NOW).to_wire()
    assert (wire["output_file"], wire["summary"], wire["usage"]) == ("", "read the readme", usage)


def task_messages() -> list[TaskSystemMessage]:
    usage: JsonObject = {"total_tokens": 1, "tool_uses": 1, "duration_ms": 5}
    call = reply(ToolUseBlock(id="t1", name="Read", input={}), message_id="m1")
    return [
        task_started(RECORD, timestamp=NOW),
        task_progress(RECORD, call, ToolUseBlock(id="t1", name="Read", input={}), usage=usage, timestamp=NOW),
        task_notification(RECORD, "completed", usage=usage, timestamp=NOW),
    ]


def test_a6_3_task_events_round_trip_as_typed_system_messages() -> None:
    for message in task_messages():
        parsed = parse_message(message.to_wire())
        assert type(parsed) is type(message)
        assert parsed.to_wire() == message.to_wire()
        assert is_sdk_only(parsed)


def test_a6_3_task_events_never_reach_the_messages_api_request() -> None:
    agent = reply(ToolUseBlock(id="toolu_1", name="Agent", input={"description": "d", "prompt": "p"}), message_id="m")
    answer = create_user_message([ToolResultBlock(tool_use_id="toolu_1", content="done")])
    plain: list[Message] = [create_user_message("go"), agent, answer]
    events = task_messages()
    with_events = [plain[0], plain[1], events[0], events[1], events[2], plain[2]]
    assert to_api_request(with_events).request == to_api_request(plain).request


def test_a6_3_task_events_are_not_recorded_and_not_in_the_parent_chain() -> None:
    events = task_messages()
    assert clean_messages_for_logging(events, CleaningPolicy()) == []
    assert clean_messages_for_logging(events, CleaningPolicy(user_type="ant")) == []
    cursor = ChainCursor("before")
    placed = cursor.place(events[0])
    assert (placed.parent_uuid, cursor.parent) == ("before", "before")  # hangs off the chain, never extends it


def test_a6_3_a_task_event_in_the_parents_log_does_not_move_its_chain_nor_ask_the_model() -> None:
    ledger = SessionLedger(new_ledger_state("p"))
    ledger.apply(
        IngressEnvelope(session_id="p", idempotency_key="k0", payload=SystemNotice(message=task_messages()[0])),
        now_ms=0,
    )
    assert ledger.state.chain_parent is None
    history = SessionHistory("p")
    history.apply(LogEntry(session_id="p", seq=1, message=create_user_message("go")))
    history.mark_published()
    for seq, message in enumerate(task_messages(), start=2):
        history.apply(LogEntry(session_id="p", seq=seq, message=message))
    assert not history.needs_request()  # A6.3: the notification "does not trigger a model turn"


def test_a6_3_a_watcher_gets_typed_task_events() -> None:
    tracker = TurnTracker("i-0")
    tracker.on_log(LogEntry(session_id="p", seq=1, message=create_user_message("go"), ingress_id="i-0"))
    events = [
        event
        for seq, message in enumerate(task_messages(), start=2)
        for event in tracker.on_log(LogEntry(session_id="p", seq=seq, message=message))
    ]
    assert [event.type for event in events] == ["task_started", "task_progress", "task_notification"]
    started, progress, done = events
    assert isinstance(started, TaskStarted)
    assert (started.task_id, started.tool_use_id, started.task_type) == ("a0123456789abcdef", "toolu_1", "local_agent")
    assert isinstance(progress, TaskProgress)
    assert progress.last_tool_name == "Read"
    assert isinstance(done, TaskNotification)
    assert (done.status, done.summary) == ("completed", "read the readme")


def test_a6_3_tail_prints_one_line_per_task_event() -> None:
    lines = [describe(seq, message.to_wire()) for seq, message in enumerate(task_messages(), start=1)]
    assert "system:task_started" in lines[0]
    assert "a0123456789abcdef local_agent: read the readme" in lines[0]
    assert "a0123456789abcdef Read (tokens 1, tools 1, 5 ms)" in lines[1]
    assert "a0123456789abcdef completed: read the readme" in lines[2]


def test_a6_3_only_workers_write_task_events() -> None:
    started = task_messages()[0]
    assert isinstance(started, TaskStartedSystemMessage)
    forged = IngressEnvelope(session_id="p", idempotency_key="k", payload=SystemNotice(message=started))
    problem = forged_internal_problem(forged, {})
    assert problem is not None
    assert "task event" in problem
