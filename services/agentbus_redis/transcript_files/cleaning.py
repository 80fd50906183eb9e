"""What gets persisted (R7.5 ``cleanMessagesForLogging``) and what joins the parent chain (R7.6).

Pure functions; they live beside the store because only the store applies them.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import TypeGuard

from agentbus_redis.messages.content import ContentBlock, ToolResultBlock, ToolUseBlock
from agentbus_redis.messages.kinds import (
    AssistantMessage,
    AttachmentMessage,
    Message,
    ProgressMessage,
    UserMessage,
    parse_message,
)
from agentbus_redis.messages.system import CompactBoundarySystemMessage, SystemMessage, SystemMessageBase, is_sdk_only
from agentbus_redis.wire import field_or_none

REPL_TOOL_NAME = "REPL"
"""The internal tool whose wrapper calls are stripped from external users' transcripts (R7.5)."""
INTERNAL_USER_TYPE = "ant"
HOOK_ADDITIONAL_CONTEXT = "hook_additional_context"

PersistableMessage = UserMessage | AssistantMessage | SystemMessage | AttachmentMessage
"""R7.6 ``isTranscriptMessage``: the kinds a transcript line can hold."""


@dataclass(frozen=True, slots=True)
class CleaningPolicy:
    """The knobs of R7.5: who the user is and whether hook context attachments are saved."""

    user_type: str = "external"
    save_hook_additional_context: bool = False
    """``CLAUDE_CODE_SAVE_HOOK_ADDITIONAL_CONTEXT``."""
    keep_attachments: bool = False
    """Write every attachment (a replayed recording's: the file held them, and a current Claude Code renders
    them into its requests from what it recorded, so the replayed transcript must keep them to normalize as
    the file does). R7.5's choice is what a live session writes, not what a recording kept."""

    @property
    def is_internal(self) -> bool:
        return self.user_type == INTERNAL_USER_TYPE


def is_transcript_message(message: Message) -> bool:
    """R7.6: user, assistant, attachment and system messages are transcript messages."""
    return isinstance(message, UserMessage | AssistantMessage | AttachmentMessage | SystemMessageBase)


def is_chain_participant(message: Message) -> bool:
    """R7.6: everything but progress moves the parent pointer (attachments and system messages do)."""
    return not isinstance(message, ProgressMessage)


def is_compact_boundary(message: Message) -> TypeGuard[CompactBoundarySystemMessage]:
    return isinstance(message, CompactBoundarySystemMessage)


def is_loggable(message: Message, policy: CleaningPolicy) -> bool:
    """R7.5: progress is never persisted; external users persist no attachment except
    ``hook_additional_context`` when enabled; control kinds (tombstones, stream events) and the SDK task
    events (A6.3: Claude Code yields them to the SDK stream only) never are."""
    if not is_transcript_message(message) or is_sdk_only(message):
        return False
    if isinstance(message, AttachmentMessage) and not (policy.is_internal or policy.keep_attachments):
        return policy.save_hook_additional_context and message.attachment_type == HOOK_ADDITIONAL_CONTEXT
    return True


def collect_repl_ids(messages: Iterable[Message]) -> frozenset[str]:
    """Ids of every ``REPL`` tool_use in ``messages`` (their results are stripped with them)."""
    return frozenset(
        block.id
        for message in messages
        if isinstance(message, AssistantMessage)
        for block in message.blocks
        if isinstance(block, ToolUseBlock) and block.name == REPL_TOOL_NAME
    )


def _is_repl_block(block: ContentBlock, repl_ids: frozenset[str]) -> bool:
    if isinstance(block, ToolUseBlock):
        return block.id in repl_ids
    if isinstance(block, ToolResultBlock):
        return block.tool_use_id in repl_ids
    return False


def _without_virtual_flag(message: PersistableMessage) -> PersistableMessage:
    """Drop ``isVirtual`` from the wire (absent, not ``false``) by re-reading the dumped line."""
    wire = message.to_wire()
    wire.pop("isVirtual", None)
    cleaned = parse_message(wire)
    assert isinstance(cleaned, PersistableMessage)
    return cleaned


def external_transcript_view(message: PersistableMessage, repl_ids: frozenset[str]) -> PersistableMessage | None:
    """R7.5 for external users: strip ``REPL`` tool_use/tool_result blocks (a message left with an empty
    block list is dropped) and write ``isVirtual`` messages as ordinary ones."""
    if isinstance(message, UserMessage | AssistantMessage) and isinstance(message.message.content, list):
        content = message.message.content
        # No REPL call in sight (the usual case): nothing to strip, the blocks are kept as they are.
        kept = [block for block in content if not _is_repl_block(block, repl_ids)] if repl_ids else content
        if not kept:
            return None
        if len(kept) != len(content):
            payload = message.message.model_copy(update={"content": kept})
            message = message.model_copy(update={"message": payload})
    if field_or_none(message, "is_virtual"):
        return _without_virtual_flag(message)
    return message


def clean_messages_for_logging(
    messages: Sequence[Message],
    policy: CleaningPolicy,
    *,
    all_messages: Sequence[Message] | None = None,
) -> list[PersistableMessage]:
    """R7.5: the messages of ``messages`` that are written, as they are written. REPL ids are collected
    from ``all_messages`` (default: ``messages``) so a result recorded after its call is still stripped."""
    loggable = [message for message in messages if is_loggable(message, policy)]
    persistable = [message for message in loggable if isinstance(message, PersistableMessage)]
    if policy.is_internal:
        return persistable
    repl_ids = collect_repl_ids(all_messages if all_messages is not None else messages)
    cleaned: list[PersistableMessage] = []
    for message in persistable:
        view = external_transcript_view(message, repl_ids)
        if view is not None:
            cleaned.append(view)
    return cleaned
