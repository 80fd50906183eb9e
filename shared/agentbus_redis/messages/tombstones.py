"""Tombstones (§6): retracting the partial assistant messages of a failed streaming attempt.

A tombstone (R1.7) names the exact message it retracts. Claude Code removes that object from the
conversation and its line from the transcript (R6.3); this module is the pure equivalent for a
history that still contains both the targets and their tombstones.
"""

from __future__ import annotations

from collections.abc import Sequence

from agentbus_redis.messages.content import ContentBlock, ToolResultBlock
from agentbus_redis.messages.kinds import AssistantMessage, Message, ProgressMessage, TombstoneMessage, UserMessage
from agentbus_redis.messages.pairing import tool_use_ids
from agentbus_redis.wire import field_or_none


def tombstones_for(attempt: Sequence[Message]) -> list[TombstoneMessage]:
    """R6.1: one tombstone for every assistant message collected during the failed streaming attempt
    (the per-block partials, often with now-invalid thinking signatures), in order."""
    return [TombstoneMessage(message=message) for message in attempt if isinstance(message, AssistantMessage)]


def _uuid_of(message: Message) -> str | None:
    uuid = field_or_none(message, "uuid")
    return uuid if isinstance(uuid, str) else None


def retracted_uuids(messages: Sequence[Message]) -> set[str]:
    """R6.3: the uuids of every message some tombstone in ``messages`` retracts."""
    targets = (_uuid_of(message.message) for message in messages if isinstance(message, TombstoneMessage))
    return {uuid for uuid in targets if uuid is not None}


def _is_retracted(message: Message, uuids: set[str], uuidless_targets: list[Message]) -> bool:
    """A tombstone targets one exact message: by uuid, or (a control kind without uuid) by equality."""
    uuid = _uuid_of(message)
    if uuid is not None:
        return uuid in uuids
    return any(message == target for target in uuidless_targets)


def _withdrawn_tool_use_ids(retracted: Sequence[Message], surviving: Sequence[Message]) -> set[str]:
    """Tool_use ids that existed only in retracted messages."""
    retracted_ids = {tid for message in retracted for tid in tool_use_ids(message)}
    surviving_ids = {tid for message in surviving for tid in tool_use_ids(message)}
    return retracted_ids - surviving_ids


def _without_withdrawn_results(message: Message, withdrawn: set[str]) -> Message | None:
    """R6.1: results of a retracted tool_use were never yielded by Claude Code; one present in a
    history must go too, or pairing (R4.28) would treat it as an orphan of some later turn, and the
    retracted call must never get a placeholder. ``None`` when nothing is left of ``message``."""
    if isinstance(message, ProgressMessage):
        return None if message.tool_use_id in withdrawn else message
    if not isinstance(message, UserMessage) or isinstance(message.message.content, str):
        return message
    content = message.message.content
    kept: list[ContentBlock] = [
        block for block in content if not (isinstance(block, ToolResultBlock) and block.tool_use_id in withdrawn)
    ]
    if len(kept) == len(content):
        return message
    if not kept:
        return None
    return message.model_copy(update={"message": message.message.model_copy(update={"content": kept})})


def apply_tombstones(messages: Sequence[Message]) -> list[Message]:
    """R6.1/R6.3: remove every message a tombstone retracts (the exact target, not its siblings of
    the same ``message.id``), the tombstones themselves, and the tool_result blocks, tool_result-only
    user messages and progress messages that answer tool_uses which existed only in retracted
    messages."""
    uuids = retracted_uuids(messages)
    uuidless_targets = [
        message.message
        for message in messages
        if isinstance(message, TombstoneMessage) and _uuid_of(message.message) is None
    ]
    retracted: list[Message] = []
    surviving: list[Message] = []
    for message in messages:
        if isinstance(message, TombstoneMessage):
            continue
        (retracted if _is_retracted(message, uuids, uuidless_targets) else surviving).append(message)
    withdrawn = _withdrawn_tool_use_ids(retracted, surviving)
    if not withdrawn:
        return surviving
    cleaned = (_without_withdrawn_results(message, withdrawn) for message in surviving)
    return [message for message in cleaned if message is not None]
