"""A3.8 / R10.6 ``maxTurns``: when a session's turn has used its model calls, and the attachment that says so.

Claude Code counts the turn's model calls (``turnCount``, 1 for the first). It checks the limit after a
reply's tool calls have run and their results were added, before the next call: when
``turnCount + 1 > maxTurns`` it yields a ``max_turns_reached`` attachment and stops — so the last reply's
calls are answered, no further model call is made, and a sub-agent's last assistant text is its result
(A3.8). The attachment is yielded, not recorded: it produces nothing for the API (R4, "Produce nothing")
and an external user's transcript keeps no attachment (R7.5).

On the bus the model worker is the one place a model call is made, so it applies the check to the stored
request of a session whose config carries ``max_turns``: instead of calling, it publishes the attachment
into the session (:func:`max_turns_attachment`); the normalizer then stops waiting for the model
(:func:`is_max_turns_reached`) and, for a child, the relay answers the parent's Agent call.

The turn's calls are counted from the request itself (any worker may serve the next one): the assistant
messages after the last user message that is a prompt — one holding no ``tool_result`` block and not the
M8.5 recovery text, which continues the turn. A SendMessage to a finished agent starts a new turn with a
new prompt, and a new count (``maxTurns`` is per run of the loop).

Shape of the attachment: ``{type: "max_turns_reached", maxTurns, turnCount}`` — the spec (R1.5, R10.6,
A3.8) names the type only; ``maxTurns`` and ``turnCount`` (the call that would have been made) are the
fields Claude Code's query loop passes.
"""

from __future__ import annotations

from collections.abc import Sequence

from agentbus_redis.json_types import JsonObject, JsonValue
from agentbus_redis.messages.factories import create_attachment_message
from agentbus_redis.messages.kinds import AssistantMessage, AttachmentMessage, Message, UserMessage
from agentbus_redis.model.limits.window import OUTPUT_TOKEN_RECOVERY_MESSAGE

MAX_TURNS_REACHED = "max_turns_reached"
"""R1.5: the attachment kind."""


def turns_in_request(api_request: JsonObject) -> int:
    """The model calls the turn has made so far: assistant messages after the turn's prompt (see the module
    docstring)."""
    messages = api_request.get("messages")
    count = 0
    for message in reversed(messages if isinstance(messages, list) else []):
        if not isinstance(message, dict):
            continue
        if message.get("role") == "assistant":
            count += 1
        elif message.get("role") == "user" and _is_prompt(message.get("content")):
            break
    return count


def _is_prompt(content: JsonValue) -> bool:
    if isinstance(content, str):
        return OUTPUT_TOKEN_RECOVERY_MESSAGE not in content
    if not isinstance(content, list):
        return True
    if any(isinstance(block, dict) and block.get("type") == "tool_result" for block in content):
        return False
    texts = "".join(
        text
        for b in content
        if isinstance(b, dict) and b.get("type") == "text" and isinstance(text := b.get("text"), str)
    )
    return OUTPUT_TOKEN_RECOVERY_MESSAGE not in texts


def next_turn_count(api_request: JsonObject) -> int:
    """``turnCount`` of the call the request asks for (1 for the turn's first)."""
    return turns_in_request(api_request) + 1


def over_max_turns(api_request: JsonObject, max_turns: int | None) -> bool:
    """A3.8: the call the request asks for would be past ``max_turns`` (None: no limit)."""
    return max_turns is not None and next_turn_count(api_request) > max_turns


def max_turns_attachment(*, max_turns: int, turn_count: int, uuid: str, timestamp: str) -> AttachmentMessage:
    """The ``max_turns_reached`` attachment (R1.5 shape ``{type:"attachment", attachment, uuid, timestamp}``)."""
    attachment: JsonObject = {"type": MAX_TURNS_REACHED, "maxTurns": max_turns, "turnCount": turn_count}
    return create_attachment_message(attachment, clock=lambda: timestamp, ids=lambda: uuid)


def is_max_turns_reached(message: Message | object) -> bool:
    return isinstance(message, AttachmentMessage) and message.attachment_type == MAX_TURNS_REACHED


def ended_at_max_turns(log: Sequence[Message]) -> bool:
    """The log's last conversational entry is a ``max_turns_reached`` attachment: the turn stopped there
    (progress, system messages and other attachments after it do not change that; a user or assistant
    message does — a new prompt starts a new turn)."""
    for message in reversed(log):
        if is_max_turns_reached(message):
            return True
        if isinstance(message, UserMessage | AssistantMessage):
            return False
    return False
