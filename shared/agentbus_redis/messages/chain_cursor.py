"""Placing messages in a session's parent chain (R7.6, R7.8).

The same rule serves the ingestion worker (which assigns every message its ``parentUuid`` before it
reaches the canonical log) and the transcript store (which records Claude Code sessions the way
``insertMessageChain`` does): one cursor, advanced message by message.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TypeVar

from agentbus_redis.messages.envelope import StoredMessageBase
from agentbus_redis.messages.kinds import AssistantMessage, AttachmentMessage, Message, ProgressMessage, UserMessage
from agentbus_redis.messages.system import CompactBoundarySystemMessage, SystemMessageBase, is_sdk_only

StoredT = TypeVar("StoredT", bound=StoredMessageBase)


def is_transcript_message(message: Message | StoredMessageBase) -> bool:
    """R7.6: the kinds a transcript holds."""
    return isinstance(message, UserMessage | AssistantMessage | AttachmentMessage | SystemMessageBase)


def is_chain_participant(message: Message | StoredMessageBase) -> bool:
    """R7.6: everything but progress joins the parent chain (attachments and system messages do) — and
    but the SDK task events (A6.3), which Claude Code never puts in its message list."""
    return (
        isinstance(message, StoredMessageBase) and not isinstance(message, ProgressMessage) and not is_sdk_only(message)
    )


@dataclass(slots=True)
class ChainCursor:
    """The parent the next chain participant hangs off (``None`` at a root)."""

    parent: str | None = None

    def place(self, message: StoredT) -> StoredT:
        """Return ``message`` with its chain fields set per R7.8, and advance the cursor.

        - a tool result hangs off the assistant that holds its tool_use (``sourceToolAssistantUUID``);
        - a compact boundary starts a new root: ``parentUuid`` null, ``logicalParentUuid`` = the previous
          parent unless the boundary already carries its own (R2.4b);
        - everything else hangs off the current parent; only chain participants move the cursor.
        """
        placed: StoredT
        if isinstance(message, CompactBoundarySystemMessage):
            logical = message.logical_parent_uuid or self.parent
            update: dict[str, object] = {"parent_uuid": None}
            if logical is not None:
                update["logical_parent_uuid"] = logical
            placed = message.model_copy(update=update)
        elif isinstance(message, UserMessage) and message.source_tool_assistant_uuid:
            placed = message.model_copy(update={"parent_uuid": message.source_tool_assistant_uuid})
        else:
            placed = message.model_copy(update={"parent_uuid": self.parent})
        if is_chain_participant(placed):
            self.parent = placed.uuid
        return placed
