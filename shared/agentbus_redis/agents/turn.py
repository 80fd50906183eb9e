"""When a child's turn is over, read from its own log (A3.9, A5, A8.1).

The child session's log holds its messages in order, tombstones for retracted ones (R6.1) and progress.
The turn is over when the last conversational message is
- an assistant message that ends the reply without asking for tools (``stop_reason`` set, not
  ``tool_use``, no ``tool_use`` block) — ``completed``;
- a synthetic API error message (M7: the model worker gave up) — ``completed`` too: its text is what the
  parent gets (A3.9);
- an interruption text (``[Request interrupted by user]`` / ``…for tool use``) — ``interrupted`` (A8.1);
- a ``max_turns_reached`` attachment after the last reply's tool results (A3.8: the model worker made no
  further call) — ``completed``: the last assistant text is the result.
Anything else (a prompt, tool results waiting for the model, a reply still streaming) is ``running``.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Literal

from agentbus_redis.messages.constants import INTERRUPT_MESSAGE, INTERRUPT_MESSAGE_FOR_TOOL_USE
from agentbus_redis.messages.content import TextBlock, ToolResultBlock, ToolUseBlock
from agentbus_redis.messages.kinds import AssistantMessage, Message, TombstoneMessage, UserMessage
from agentbus_redis.model.limits.max_turns import ended_at_max_turns, is_max_turns_reached
from agentbus_redis.wire import field_or_none

TurnState = Literal["running", "completed", "interrupted"]

_INTERRUPT_TEXTS = frozenset({INTERRUPT_MESSAGE, INTERRUPT_MESSAGE_FOR_TOOL_USE})


def live_messages(log: Iterable[Message]) -> list[UserMessage | AssistantMessage]:
    """The child's user and assistant messages in log order, without the retracted ones."""
    messages: list[UserMessage | AssistantMessage] = []
    retracted: set[str] = set()
    for message in log:
        if isinstance(message, TombstoneMessage):
            uuid = field_or_none(message.message, "uuid")
            if isinstance(uuid, str):
                retracted.add(uuid)
        elif isinstance(message, UserMessage | AssistantMessage):
            messages.append(message)
    return [message for message in messages if message.uuid not in retracted]


def is_interruption(message: UserMessage) -> bool:
    content = message.message.content
    if isinstance(content, str):
        return content in _INTERRUPT_TEXTS
    return len(content) == 1 and isinstance(content[0], TextBlock) and content[0].text in _INTERRUPT_TEXTS


def ends_reply(message: AssistantMessage) -> bool:
    """The final message of a reply that asks for no tool."""
    if message.is_api_error_message:
        return True
    if any(isinstance(block, ToolUseBlock) for block in message.blocks):
        return False
    stop = message.message.stop_reason
    return stop is not None and stop != "tool_use"


@dataclass(frozen=True, slots=True)
class TurnOutcome:
    state: TurnState
    messages: Sequence[UserMessage | AssistantMessage]
    """The child's live messages (what the result is built from)."""


def turn_outcome(log: Iterable[Message], *, since_uuid: str | None = None) -> TurnOutcome:
    """Whether the child's turn is over, and how (see the module docstring). With ``since_uuid`` (A4.4: the
    prompt a SendMessage continued the child with) only that prompt and what follows count; the turn is
    ``running`` until the prompt is logged."""
    log = list(log)
    messages = live_messages(log)
    if since_uuid is not None:
        start = next((index for index, message in enumerate(messages) if message.uuid == since_uuid), None)
        if start is None:
            return TurnOutcome("running", [])
        messages = messages[start:]
    if ended_at_max_turns(log):
        return TurnOutcome("completed", messages)
    for message in reversed(messages):
        if isinstance(message, UserMessage):
            if message.is_meta:
                continue
            return TurnOutcome("interrupted" if is_interruption(message) else "running", messages)
        return TurnOutcome("completed" if ends_reply(message) else "running", messages)
    return TurnOutcome("running", messages)


def may_end_turn(message: Message) -> bool:
    """Cheap pre-check on one new log entry: could the turn have ended with it?"""
    if is_max_turns_reached(message):
        return True
    if isinstance(message, AssistantMessage):
        return ends_reply(message)
    return isinstance(message, UserMessage) and is_interruption(message)


def shows_tool_activity(message: Message) -> bool:
    """A6.1: a child message with a ``tool_use`` or ``tool_result`` block is forwarded as progress."""
    if isinstance(message, AssistantMessage):
        return any(isinstance(block, ToolUseBlock) for block in message.blocks)
    if isinstance(message, UserMessage):
        return any(isinstance(block, ToolResultBlock) for block in message.blocks)
    return False


def replies(messages: Iterable[UserMessage | AssistantMessage]) -> int:
    """How many model replies (distinct ``message.id``; a synthetic message counts alone) — A3.8 turns."""
    seen: set[str] = set()
    for message in messages:
        if isinstance(message, AssistantMessage):
            seen.add(message.api_message_id or message.uuid)
    return len(seen)
