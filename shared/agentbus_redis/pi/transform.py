"""P5: ``transformMessages``, the repair every pi provider runs before converting a request.

Two passes: per-message rewriting for the target model (thinking, text, tool-call ids), then orphan repair
(a ``No result provided`` result for each call left unanswered when the next assistant or user message
comes) and removal of failed (``error``/``aborted``) assistant turns. Faithful to pi, including what it
does not repair (P5.8): orphan and duplicate results, late results, a trailing assistant.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from agentbus_redis.pi.constants import NO_RESULT_PROVIDED
from agentbus_redis.pi.content import PiBlock, PiText, PiThinking, PiToolCall
from agentbus_redis.pi.messages import PiAssistantMessage, PiLlmMessage, PiToolResultMessage, PiUserMessage

ToolCallIdNormalizer = Callable[[str], str]

_NOT_ANTHROPIC_ID = re.compile(r"[^a-zA-Z0-9_-]")


def normalize_anthropic_tool_call_id(tool_call_id: str) -> str:
    """P5.5 (Anthropic Messages, Bedrock Converse): other characters → ``_``, at most 64."""
    return _NOT_ANTHROPIC_ID.sub("_", tool_call_id)[:64]


@dataclass(frozen=True, slots=True)
class PiTargetModel:
    """The model a request is built for (P5.2 compares all three)."""

    api: str
    provider: str
    id: str


def is_same_model(message: PiAssistantMessage, model: PiTargetModel) -> bool:
    """P5.2."""
    return message.provider == model.provider and message.api == model.api and message.model == model.id


def _thinking(block: PiThinking, same_model: bool) -> PiBlock | None:
    """P5.3, first match wins."""
    if block.redacted:
        return block if same_model else None
    if same_model and block.thinking_signature:
        return block
    if not block.thinking.strip():
        return None
    if same_model:
        return block
    return PiText(text=block.thinking)


def _rewrite_assistant(
    message: PiAssistantMessage,
    model: PiTargetModel,
    normalize: ToolCallIdNormalizer | None,
    id_map: dict[str, str],
) -> PiAssistantMessage:
    same_model = is_same_model(message, model)
    blocks: list[PiBlock] = []
    for block in message.content:
        if isinstance(block, PiThinking):
            kept = _thinking(block, same_model)
            if kept is not None:
                blocks.append(kept)
        elif isinstance(block, PiText):
            blocks.append(block if same_model else PiText(text=block.text))  # P5.4
        elif isinstance(block, PiToolCall) and not same_model:  # P5.5
            call = block
            if call.thought_signature is not None:
                call = PiToolCall(id=call.id, name=call.name, arguments=call.arguments)
            if normalize is not None:
                new_id = normalize(call.id)
                if new_id != call.id:
                    id_map[call.id] = new_id
                    call = call.model_copy(update={"id": new_id})
            blocks.append(call)
        else:
            blocks.append(block)
    return message.model_copy(update={"content": blocks})


def synthetic_result(call: PiToolCall, timestamp_ms: int) -> PiToolResultMessage:
    """P5.7, exactly: no ``details`` key."""
    return PiToolResultMessage(
        tool_call_id=call.id,
        tool_name=call.name,
        content=[PiText(text=NO_RESULT_PROVIDED)],
        is_error=True,
        timestamp=timestamp_ms,
    )


def rewrite_for_model(
    messages: Sequence[PiLlmMessage], model: PiTargetModel, normalize: ToolCallIdNormalizer | None = None
) -> list[PiLlmMessage]:
    """P5.1 (pass 1): each assistant's blocks for the target model; results follow renamed call ids."""
    id_map: dict[str, str] = {}
    rewritten: list[PiLlmMessage] = []
    for message in messages:
        if isinstance(message, PiAssistantMessage):
            rewritten.append(_rewrite_assistant(message, model, normalize, id_map))
        elif isinstance(message, PiToolResultMessage) and message.tool_call_id in id_map:
            rewritten.append(message.model_copy(update={"tool_call_id": id_map[message.tool_call_id]}))
        else:
            rewritten.append(message)
    return rewritten


def transform_messages(
    messages: Sequence[PiLlmMessage],
    model: PiTargetModel,
    normalize: ToolCallIdNormalizer | None = None,
    *,
    now_ms: int = 0,
) -> list[PiLlmMessage]:
    """P5.0–P5.7 (examples E1–E13 of P5.9 are the tests)."""
    return repair_orphans(rewrite_for_model(messages, model, normalize), now_ms=now_ms)


def repair_orphans(messages: Sequence[PiLlmMessage], *, now_ms: int = 0) -> list[PiLlmMessage]:
    """P5.6 (pass 2): synthetic results for calls left unanswered, failed assistant turns removed."""
    result: list[PiLlmMessage] = []
    pending: list[PiToolCall] = []
    seen: set[str] = set()

    def flush() -> None:
        result.extend(synthetic_result(call, now_ms) for call in pending if call.id not in seen)
        pending.clear()
        seen.clear()

    for message in messages:
        if isinstance(message, PiAssistantMessage):
            if pending:
                flush()
            if message.failed:
                continue
            calls = message.tool_calls()
            if calls:
                pending[:] = calls
                seen.clear()
            result.append(message)
        elif isinstance(message, PiToolResultMessage):
            seen.add(message.tool_call_id)
            result.append(message)
        elif isinstance(message, PiUserMessage):
            if pending:
                flush()
            result.append(message)
    return result
