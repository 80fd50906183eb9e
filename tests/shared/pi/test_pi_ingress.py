"""Issue 17, producers: a pi-shaped message published on the bus is mapped at the ingestion boundary into
the Claude Code model (P10, pi/ingress.py), so the ledger and everything after it see one model."""

from __future__ import annotations

import pytest

from agentbus_redis.bus.events import IngressEnvelope, PiMessagePayload
from agentbus_redis.bus.internal_events import forged_internal_problem
from agentbus_redis.bus.ledger import LedgerOutput, SessionLedger, new_ledger_state
from agentbus_redis.clock import FixedClock
from agentbus_redis.ids import SequentialIds
from agentbus_redis.messages.content import TextBlock, ToolResultBlock, ToolUseBlock
from agentbus_redis.messages.kinds import AssistantMessage, UserMessage
from agentbus_redis.pi.ingress import pi_message_to_claude_code
from agentbus_redis.pi.messages import PI_MESSAGE_ADAPTER
from tests.shared.pi.builders import Obj, a, tc, text, tr, u

NOW = "2026-01-01T00:00:00.000Z"


def mapped(obj: Obj) -> object:
    message = PI_MESSAGE_ADAPTER.validate_python(obj, by_alias=True, by_name=False)
    return pi_message_to_claude_code(message, session_id="s1", uuid="u-1", now=NOW)


def test_p10_1_user_assistant_and_tool_result_map_to_their_claude_code_messages() -> None:
    user = mapped(u("hello"))
    assert isinstance(user, UserMessage)
    assert user.uuid == "u-1"
    assistant = mapped(a(text("calling"), tc("toolu_1")))
    assert isinstance(assistant, AssistantMessage)
    assert [block.type for block in assistant.message.content] == ["text", "tool_use"]
    assert assistant.message.stop_reason == "tool_use"  # P10.3
    result = mapped(tr("toolu_1", "done"))
    assert isinstance(result, UserMessage)
    assert isinstance(result.message.content, list)
    block = result.message.content[0]
    assert isinstance(block, ToolResultBlock)
    assert block.tool_use_id == "toolu_1"


def test_p10_3_a_failed_turn_is_a_synthetic_api_error_and_bash_is_pis_text() -> None:
    failed = mapped(a(tc("toolu_2"), stop="aborted", errorMessage="Request was aborted."))
    assert isinstance(failed, AssistantMessage)
    assert failed.message.model == "<synthetic>"
    assert not any(isinstance(block, ToolUseBlock) for block in failed.message.content)
    bash = mapped({"role": "bashExecution", "command": "ls", "output": "a", "exitCode": 0, "timestamp": 1})
    assert isinstance(bash, UserMessage)
    content = bash.message.content
    assert isinstance(content, list)
    first = content[0]
    assert isinstance(first, TextBlock)
    assert first.text.startswith("Ran `ls`")  # P4.4


@pytest.fixture
def ledger() -> SessionLedger:
    return SessionLedger(new_ledger_state("s1"), tool_deadline_ms=1000, clock=FixedClock(), ids=SequentialIds(100))


def send(ledger: SessionLedger, payload: PiMessagePayload, key: str) -> LedgerOutput:
    return ledger.apply(IngressEnvelope(session_id="s1", idempotency_key=key, payload=payload), now_ms=0)


def pi(obj: Obj, uuid: str, *, execute_tools: bool = True) -> PiMessagePayload:
    message = PI_MESSAGE_ADAPTER.validate_python(obj, by_alias=True, by_name=False)
    return PiMessagePayload(message=message, uuid=uuid, execute_tools=execute_tools)


def test_the_ledger_applies_a_pi_turn_as_its_claude_code_messages(ledger: SessionLedger) -> None:
    send(ledger, pi(u("list"), "m1"), "k1")
    out = send(ledger, pi(a(tc("toolu_1")), "m2", execute_tools=False), "k2")
    assert not out.tool_jobs  # the producer answers its own calls
    out = send(ledger, pi(tr("toolu_1", "a b"), "m3"), "k3")
    assert out.invalid is None
    assert out.closed_tool_use_ids == ["toolu_1"]
    assert [entry.message.type for entry in out.entries] == ["user"]


def test_a_pi_tool_result_for_a_dispatched_call_is_the_tool_workers(ledger: SessionLedger) -> None:
    """bus/internal_events.py: a pi toolResult answers its call like a tool_result does."""
    out = send(ledger, pi(a(tc("toolu_9")), "m1"), "k1")
    assert len(out.tool_jobs) == 1
    forged = IngressEnvelope(session_id="s1", idempotency_key="k2", payload=pi(tr("toolu_9"), "m2"))
    assert forged_internal_problem(forged, ledger.state.pending) is not None
