"""P4.3–P4.6: the coding agent's ``convertToLlm``: agent messages → the LLM's user/assistant/toolResult."""

from __future__ import annotations

from collections.abc import Sequence

from agentbus_redis.pi.constants import (
    BRANCH_SUMMARY_PREFIX,
    BRANCH_SUMMARY_SUFFIX,
    COMPACTION_SUMMARY_PREFIX,
    COMPACTION_SUMMARY_SUFFIX,
)
from agentbus_redis.pi.content import PiBlock, PiImage, PiText
from agentbus_redis.pi.messages import (
    PiAssistantMessage,
    PiBashExecution,
    PiBranchSummary,
    PiCompactionSummary,
    PiCustomMessage,
    PiLlmMessage,
    PiMessage,
    PiToolResultMessage,
    PiUserMessage,
)

IMAGES_DISABLED = "Image reading is disabled."
"""P4.6."""


def bash_execution_to_text(message: PiBashExecution) -> str:
    """P4.4, exactly."""
    text = f"Ran `{message.command}`\n"
    text += f"```\n{message.output}\n```" if message.output else "(no output)"
    if message.cancelled:
        text += "\n\n(command cancelled)"
    elif isinstance(message.exit_code, int) and message.exit_code != 0:
        text += f"\n\nCommand exited with code {message.exit_code}"
    if message.truncated and message.full_output_path:
        text += f"\n\n[Output truncated. Full output: {message.full_output_path}]"
    return text


def _user_text(text: str, timestamp: int | float | None) -> PiUserMessage:
    return PiUserMessage(content=[PiText(text=text)], timestamp=timestamp)


def convert_message(message: PiMessage) -> PiLlmMessage | None:
    """P4.3, one message (``None``: dropped)."""
    if isinstance(message, PiUserMessage | PiAssistantMessage | PiToolResultMessage):
        return message
    if isinstance(message, PiBashExecution):
        return None if message.exclude_from_context else _user_text(bash_execution_to_text(message), message.timestamp)
    if isinstance(message, PiCustomMessage):
        content = [PiText(text=message.content)] if isinstance(message.content, str) else message.content
        return PiUserMessage(content=content, timestamp=message.timestamp)
    if isinstance(message, PiBranchSummary):
        return _user_text(BRANCH_SUMMARY_PREFIX + message.summary + BRANCH_SUMMARY_SUFFIX, message.timestamp)
    if isinstance(message, PiCompactionSummary):
        return _user_text(COMPACTION_SUMMARY_PREFIX + message.summary + COMPACTION_SUMMARY_SUFFIX, message.timestamp)
    return None


def _is_disabled_text(block: PiBlock | None) -> bool:
    return isinstance(block, PiText) and block.text == IMAGES_DISABLED


def _without_images(content: list[PiBlock]) -> list[PiBlock]:
    blocks: list[PiBlock] = []
    for block in content:
        replaced = PiText(text=IMAGES_DISABLED) if isinstance(block, PiImage) else block
        previous = blocks[-1] if blocks else None
        if _is_disabled_text(replaced) and _is_disabled_text(previous):
            continue
        blocks.append(replaced)
    return blocks


def block_images(message: PiLlmMessage) -> PiLlmMessage:
    """P4.6: every image of a user or toolResult message becomes the disabled text (runs collapsed)."""
    if isinstance(message, PiAssistantMessage) or isinstance(message.content, str):
        return message
    return message.model_copy(update={"content": _without_images(message.content)})


def convert_to_llm(messages: Sequence[PiMessage], *, images_blocked: bool = False) -> list[PiLlmMessage]:
    """P4.3 (+ P4.6 when the *blockImages* setting is on)."""
    converted = [llm for message in messages if (llm := convert_message(message)) is not None]
    return [block_images(message) for message in converted] if images_blocked else converted
