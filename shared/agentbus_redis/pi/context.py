"""P8: rebuilding the LLM context of a pi session from its tree (``buildSessionContext``)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Final

from agentbus_redis.pi.entries import (
    PiBranchSummaryEntry,
    PiCompaction,
    PiCustomMessageEntry,
    PiEntry,
    PiMessageEntry,
    PiModelChange,
    PiThinkingLevelChange,
)
from agentbus_redis.pi.messages import (
    PiAssistantMessage,
    PiBranchSummary,
    PiCompactionSummary,
    PiCustomMessage,
    PiMessage,
)


class _LastEntry:
    """The default leaf: the last entry in file order (P8.1)."""


LAST_ENTRY: Final = _LastEntry()


@dataclass(frozen=True, slots=True)
class PiModelRef:
    provider: str
    model_id: str


@dataclass(frozen=True, slots=True)
class PiContext:
    """What ``buildSessionContext`` returns, plus the path it walked."""

    messages: list[PiMessage]
    thinking_level: str
    model: PiModelRef | None
    path: list[PiEntry]


def iso_to_ms(timestamp: str | None) -> int | None:
    """An entry's ISO timestamp as epoch milliseconds (P8.4 stamps rebuilt messages with it)."""
    if not timestamp:
        return None
    try:
        return int(datetime.fromisoformat(timestamp).timestamp() * 1000)
    except ValueError:
        return None


def path_to(entries: Sequence[PiEntry], leaf: PiEntry) -> list[PiEntry]:
    """P8.2: from the leaf up ``parentId`` until null or unknown, root first. Unlike pi, a repeated id
    (a cycle) ends the walk instead of looping forever."""
    by_id = {entry.id: entry for entry in entries if entry.id is not None}
    path: list[PiEntry] = []
    seen: set[str] = set()
    current: PiEntry | None = leaf
    while current is not None:
        path.append(current)
        if current.id is not None:
            seen.add(current.id)
        parent = current.parent_id
        current = by_id.get(parent) if parent is not None and parent not in seen else None
    path.reverse()
    return path


def context_message(entry: PiEntry) -> PiMessage | None:
    """P8.4: what one path entry contributes to the context."""
    if isinstance(entry, PiMessageEntry):
        return entry.message
    if isinstance(entry, PiCustomMessageEntry):
        return PiCustomMessage(
            custom_type=entry.custom_type,
            content=entry.content,
            display=entry.display,
            details=entry.details,
            timestamp=iso_to_ms(entry.timestamp),
        )
    if isinstance(entry, PiBranchSummaryEntry) and entry.summary:
        return PiBranchSummary(summary=entry.summary, from_id=entry.from_id, timestamp=iso_to_ms(entry.timestamp))
    return None


def _emit(entries: Sequence[PiEntry]) -> list[PiMessage]:
    return [message for entry in entries if (message := context_message(entry)) is not None]


def build_session_context(entries: Sequence[PiEntry], leaf_id: str | _LastEntry | None = LAST_ENTRY) -> PiContext:
    """P8.1–P8.6. ``leaf_id=None`` is pi's ``resetLeaf()`` (empty context); an unknown id, or none given,
    falls back to the last entry."""
    if leaf_id is None or not entries:
        return PiContext(messages=[], thinking_level="off", model=None, path=[])
    leaf = next((entry for entry in entries if entry.id == leaf_id), None) if isinstance(leaf_id, str) else None
    path = path_to(entries, leaf or entries[-1])

    thinking_level = "off"
    model: PiModelRef | None = None
    compaction: PiCompaction | None = None
    for entry in path:
        if isinstance(entry, PiThinkingLevelChange):
            thinking_level = entry.thinking_level
        elif isinstance(entry, PiModelChange):
            model = PiModelRef(entry.provider, entry.model_id)
        elif isinstance(entry, PiMessageEntry) and isinstance(entry.message, PiAssistantMessage):
            message = entry.message
            if message.provider is not None and message.model is not None:
                model = PiModelRef(message.provider, message.model)
        elif isinstance(entry, PiCompaction):
            compaction = entry

    if compaction is None:
        return PiContext(_emit(path), thinking_level, model, path)
    cut = next(index for index, entry in enumerate(path) if entry is compaction)
    summary = PiCompactionSummary(
        summary=compaction.summary, tokens_before=compaction.tokens_before, timestamp=iso_to_ms(compaction.timestamp)
    )
    kept_start = next(
        (index for index, entry in enumerate(path[:cut]) if entry.id == compaction.first_kept_entry_id), cut
    )
    messages: list[PiMessage] = [summary, *_emit(path[kept_start:cut]), *_emit(path[cut + 1 :])]
    return PiContext(messages, thinking_level, model, path)
