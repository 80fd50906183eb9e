"""Load-time fixups of the message map (R7.16, R7.17.1, R7.17.2).

Each function takes the uuid → message map in file position order (a repeated uuid keeps its first
position, R7.14) and returns a new map; nothing is mutated. Messages are frozen models, so a changed
message is a ``model_copy`` of the original.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Literal

from agentbus_redis.json_types import JsonValue
from agentbus_redis.messages.kinds import AssistantMessage, AttachmentMessage, UserMessage
from agentbus_redis.messages.system import CompactBoundarySystemMessage, SystemMessage
from agentbus_redis.transcript.lines import OtherMessageLine

ResumedMessage = UserMessage | AssistantMessage | AttachmentMessage | SystemMessage
"""The messages a resume returns: the transcript messages of R7.6 the models understand."""

TranscriptMessage = ResumedMessage | OtherMessageLine
"""R7.6 ``isTranscriptMessage``: what the loaded map holds (progress lines are bridged, not loaded). A
line its model refuses is kept as an :class:`OtherMessageLine` so the chain walks through it (R7.14)."""

MessageMap = dict[str, TranscriptMessage]

RelinkOutcome = Literal["none", "relinked", "stale", "walk_broken"]
"""What R7.17.1 did: no segment anywhere; live segment relinked (+ prune); stale segment (prune only);
tail→head walk broke (nothing changed, full history loads)."""

_STALE_USAGE_KEYS = ("input_tokens", "output_tokens", "cache_creation_input_tokens", "cache_read_input_tokens")


def js_truthy(value: JsonValue) -> bool:
    """JavaScript truthiness of a JSON value (objects and arrays are truthy even when empty)."""
    if isinstance(value, dict | list):
        return True
    return bool(value)


def bridge_progress_parent(bridge: Mapping[str, str | None], parent: str | None) -> str | None:
    """R7.16: the nearest non-progress ancestor for a parent that may be a (chain of) progress line(s).

    ``bridge`` maps each progress uuid seen so far to its own resolved parent; a parent that is not a
    known progress line is returned unchanged."""
    if parent is not None and parent in bridge:
        return bridge[parent]
    return parent


def with_parent(message: TranscriptMessage, parent: str | None) -> TranscriptMessage:
    """A copy of ``message`` whose ``parentUuid`` is ``parent``."""
    return message.model_copy(update={"parent_uuid": parent})


def _string_field(value: JsonValue, key: str) -> str | None:
    found = value.get(key) if isinstance(value, dict) else None
    return found if isinstance(found, str) else None


def _zero_stale_usage(message: AssistantMessage) -> AssistantMessage:
    """R7.17.1: preserved assistants' on-disk usage reflects the pre-compact context; zero it."""
    usage = dict(message.message.usage or {})
    usage.update(dict.fromkeys(_STALE_USAGE_KEYS, 0))
    payload = message.message.model_copy(update={"usage": usage})
    return message.model_copy(update={"message": payload})


def _walk_preserved(messages: MessageMap, head: str | None, tail: str | None) -> list[str] | None:
    """The uuids from ``tail`` up to ``head`` via parentUuid, or None if the walk breaks or loops."""
    walked: list[str] = []
    seen: set[str] = set()
    current = messages.get(tail) if tail is not None else None
    while current is not None and current.uuid not in seen:
        seen.add(current.uuid)
        walked.append(current.uuid)
        if current.uuid == head:
            return walked
        current = messages.get(current.parent_uuid) if current.parent_uuid else None
    return None


def apply_preserved_segment_relinks(messages: MessageMap) -> tuple[MessageMap, RelinkOutcome]:
    """R7.17.1 (``applyPreservedSegmentRelinks``).

    Find the last compact boundary and the last one with ``compactMetadata.preservedSegment``. No
    segment → unchanged. If the segment boundary is the last boundary ("live"): walk tail → head (a
    broken walk aborts everything, so the full history loads), set head.parentUuid = anchor,
    re-parent anchor's other children to tail, zero the token counts of preserved assistants. Live or
    stale: delete every message positioned before the last boundary that is not preserved.
    """
    order = list(messages)
    last_boundary = -1
    segment_boundary = -1
    segment: JsonValue = None
    for index, uuid in enumerate(order):
        message = messages[uuid]
        if isinstance(message, CompactBoundarySystemMessage):
            last_boundary = index
            candidate = (message.compact_metadata or {}).get("preservedSegment")
            if js_truthy(candidate):
                segment, segment_boundary = candidate, index
    if segment_boundary < 0:
        return messages, "none"
    live = segment_boundary == last_boundary
    head, anchor, tail = (_string_field(segment, key) for key in ("headUuid", "anchorUuid", "tailUuid"))
    preserved: set[str] = set()
    result = dict(messages)
    if live:
        walked = _walk_preserved(messages, head, tail)
        if walked is None:
            return messages, "walk_broken"
        preserved.update(walked)
        for uuid, message in messages.items():
            if uuid == head:
                result[uuid] = with_parent(message, anchor)
            elif anchor is not None and message.parent_uuid == anchor:
                result[uuid] = with_parent(message, tail)
        for uuid in walked:
            kept = result[uuid]
            if isinstance(kept, AssistantMessage):
                result[uuid] = _zero_stale_usage(kept)
    for index, uuid in enumerate(order):
        if index < last_boundary and uuid not in preserved:
            del result[uuid]
    return result, "relinked" if live else "stale"


def _removed_uuids(message: TranscriptMessage) -> list[str]:
    snip = (message.model_extra or {}).get("snipMetadata")
    removed = snip.get("removedUuids") if isinstance(snip, dict) else None
    return [uuid for uuid in removed if isinstance(uuid, str)] if isinstance(removed, list) else []


def apply_snip_removals(messages: MessageMap) -> MessageMap:
    """R7.17.2 (internal snip feature): delete the uuids listed in any entry's
    ``snipMetadata.removedUuids`` and re-parent survivors across the gap to the nearest surviving
    ancestor (or null when the gap reaches an absent message)."""
    to_delete: set[str] = set()
    for message in messages.values():
        to_delete.update(_removed_uuids(message))
    if not to_delete:
        return messages
    deleted_parent: dict[str, str | None] = {uuid: messages[uuid].parent_uuid for uuid in to_delete if uuid in messages}
    result = {uuid: message for uuid, message in messages.items() if uuid not in to_delete}

    def resolve(start: str) -> str | None:
        path: list[str] = []
        current: str | None = start
        while current is not None and current in to_delete:
            path.append(current)
            if current not in deleted_parent:
                current = None
                break
            current = deleted_parent[current]
        for step in path:
            deleted_parent[step] = current
        return current

    for uuid, message in list(result.items()):
        if message.parent_uuid and message.parent_uuid in to_delete:
            result[uuid] = with_parent(message, resolve(message.parent_uuid))
    return result
