"""Thinking replay rules of the API safety finalizer (anthropic-api-rules.md §1.10, §3.7).

The API verifies every thinking signature: a block is accepted only byte-identical to what the model
returned, from the model that produced it. A thinking block that cannot pass that check — unsigned
(an aborted stream), signed with an exporter's placeholder, or produced by another model — is never
replayed as ``thinking``; it is dropped and reported. Signed blocks are never touched, so the latest
assistant's thinking stays byte-identical and in order.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence

from agentbus_redis.api.validation import REDACTED_SIGNATURE_PLACEHOLDERS
from agentbus_redis.messages.constants import SYNTHETIC_MODEL
from agentbus_redis.messages.content import ContentBlock, RedactedThinkingBlock, ThinkingBlock, is_thinking
from agentbus_redis.messages.kinds import ApiMessage, AssistantMessage, UserMessage
from agentbus_redis.normalize.passes.content_ops import with_assistant_content
from agentbus_redis.normalize.report import PassResult, Repair, RepairKind, Repairs

_DATE_SUFFIX = re.compile(r"[-@]\d{8}$")


def same_model(a: str, b: str) -> bool:
    """Model ids equal up to a dated snapshot suffix (``claude-x-4-5`` = ``claude-x-4-5-20250929``,
    Vertex ``@20250929``)."""
    return _DATE_SUFFIX.sub("", a) == _DATE_SUFFIX.sub("", b)


def unreplayable_reason(block: ContentBlock) -> str | None:
    """Why this thinking block would fail the signature check (``None`` when it may be replayed)."""
    if isinstance(block, ThinkingBlock):
        signature = block.signature
        if not isinstance(signature, str) or not signature.strip():
            return "unsigned"
        if signature in REDACTED_SIGNATURE_PLACEHOLDERS:
            return "placeholder signature"
    if isinstance(block, RedactedThinkingBlock) and not block.data:
        return "redacted_thinking without data"
    return None


def open_assistant_turn(messages: Sequence[ApiMessage]) -> set[int]:
    """Indexes of the assistant messages after the last user message that is a new prompt (no
    tool_result): the turn a request continues, where thinking-mode rules apply."""
    indexes: set[int] = set()
    for index in range(len(messages) - 1, -1, -1):
        message = messages[index]
        if isinstance(message, UserMessage) and not any(b.type == "tool_result" for b in message.blocks):
            break
        if isinstance(message, AssistantMessage):
            indexes.add(index)
    return indexes


def _drop_thinking(
    messages: Sequence[ApiMessage], reason_for: Callable[[int, AssistantMessage, ContentBlock], str | None]
) -> PassResult:
    """Drop every thinking block for which ``reason_for(index, message, block)`` gives a reason."""
    result: list[ApiMessage] = []
    repairs: Repairs = []
    for index, message in enumerate(messages):
        if not isinstance(message, AssistantMessage):
            result.append(message)
            continue
        kept: list[ContentBlock] = []
        for block in message.blocks:
            reason = reason_for(index, message, block) if is_thinking(block) else None
            if reason is None:
                kept.append(block)
                continue
            repairs.append(
                Repair(kind=RepairKind.THINKING_DROPPED, rule="API §1.10", message_uuid=message.uuid, detail=reason)
            )
        result.append(message if len(kept) == len(message.blocks) else with_assistant_content(message, kept))
    return result, repairs


def drop_unreplayable_thinking(messages: Sequence[ApiMessage], *, target_model: str | None = None) -> PassResult:
    """API §1.10: drop thinking that cannot pass the signature check — unsigned or placeholder-signed
    thinking, empty redacted thinking, and any thinking of an assistant whose model is not
    ``target_model`` (when both are known)."""

    def reason_for(_index: int, message: AssistantMessage, block: ContentBlock) -> str | None:
        reason = unreplayable_reason(block)
        model = message.message.model
        if (
            reason is None
            and target_model
            and model
            and model != SYNTHETIC_MODEL
            and not same_model(model, target_model)
        ):
            reason = f"from model {model}, request goes to {target_model}"
        return reason

    return _drop_thinking(messages, reason_for)


def drop_open_turn_thinking_when_disabled(
    messages: Sequence[ApiMessage], *, thinking_enabled: bool | None = False
) -> PassResult:
    """API §1.10: "an assistant message in the final position cannot contain thinking" when thinking
    is disabled — and a request without a thinking config has it disabled, so with ``thinking_enabled``
    False the open assistant turn carries none. ``True`` or ``None`` (the sender fits thinking to the
    open turn) keep it: with thinking on, the last assistant turn's thinking must be passed back
    unmodified in a tool loop. Runs after the structure is final (the open turn depends on which user
    messages carry tool_results); it never empties a non-final assistant, since every non-final one of
    the open turn holds the tool_use its next message answers."""
    if thinking_enabled is not False:
        return list(messages), []
    open_turn = open_assistant_turn(messages)
    return _drop_thinking(
        messages, lambda index, _m, _b: "thinking not enabled, open assistant turn" if index in open_turn else None
    )
