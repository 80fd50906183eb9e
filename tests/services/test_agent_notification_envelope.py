"""A5.4 the queued prompt a background child's end publishes to its parent (subagents/background.py):
a limit's error goes into the ``failed`` summary, an interrupted child is ``killed``, the key is the
round's call (notified at most once), and the prompt waits for the parent's turn (``queued``)."""

from __future__ import annotations

from agentbus_redis.agents.record import ChildRecord
from agentbus_redis.agents.results import interrupted_result, wall_time_exceeded
from agentbus_redis.bus.events import UserPrompt
from agentbus_redis.messages.factories import create_assistant_message, create_user_message
from agentbus_redis.messages.kinds import Message
from agentbus_redis.subagents.background import notification_envelope

RECORD = ChildRecord(
    session_id="p:agent-a0123456789abcdef",
    parent_session_id="p",
    parent_tool_use_id="toolu_bg",
    parent_assistant_uuid="u1",
    agent_id="a0123456789abcdef",
    agent_type="general-purpose",
    description="scan",
    prompt="Scan.",
    dispatched_ms=0,
    started_ms=1_000,
    deadline_ms=61_000,
    depth=1,
    background=True,
    output_file="/w/.agentbus/tasks/a0123456789abcdef.output",
)


def test_a5_4_a_child_stopped_by_its_wall_time_notifies_failed_with_the_limits_text() -> None:
    log: list[Message] = [create_user_message("Scan."), create_assistant_message("Scanning…")]
    envelope = notification_envelope(RECORD, wall_time_exceeded(RECORD.facts, 60), "failed", log, now_ms=61_000)
    assert (envelope.session_id, envelope.idempotency_key) == ("p", "task_notification:toolu_bg")
    prompt = envelope.payload
    assert isinstance(prompt, UserPrompt)
    assert (prompt.queued, prompt.origin) == (True, {"kind": "task-notification"})
    assert isinstance(prompt.content, str)
    assert (
        '<status>failed</status>\n<summary>Agent "scan" failed: Agent "scan" (agentId: a0123456789abcdef) '
        "exceeded its wall-time limit of 60s and was stopped</summary>\n<result>Scanning…</result>"
    ) in prompt.content
    assert "<duration_ms>60000</duration_ms>" in prompt.content


def test_a8_3_an_interrupted_background_child_is_killed() -> None:
    envelope = notification_envelope(RECORD, interrupted_result(), "interrupted", [], now_ms=2_000)
    assert isinstance(envelope.payload, UserPrompt)
    assert '<status>killed</status>\n<summary>Agent "scan" was stopped</summary>' in str(envelope.payload.content)
