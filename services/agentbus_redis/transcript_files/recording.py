"""The pure steps of recording a batch (R7.7, R7.8, R7.11): which messages are new, which parent each
line gets, and what a compact boundary needs on disk before it. No I/O; the store applies them."""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass, field

from agentbus_redis.json_types import JsonValue
from agentbus_redis.messages.kinds import Message, UserMessage
from agentbus_redis.transcript_files.cleaning import PersistableMessage, is_chain_participant, is_compact_boundary
from agentbus_redis.transcript_files.lines import ChainFields, LineTemplate, dumps_line
from agentbus_redis.transcript_files.logged_wire import LoggedWires, wire_of
from agentbus_redis.wire import field_or_none


@dataclass(frozen=True, slots=True)
class TeamInfo:
    """R7.3: ``teamName``/``agentName`` of every line and ``promptId`` of user lines."""

    team_name: str | None = None
    agent_name: str | None = None
    prompt_id: str | None = None


@dataclass(frozen=True, slots=True)
class NewMessages:
    """R7.7 step 3: the messages to write, the already-recorded ones, and the starting parent."""

    new: list[PersistableMessage]
    skipped: list[str]
    starting_parent: str | None


@dataclass(frozen=True, slots=True)
class ChainLines:
    """R7.8: one serialized line per message, their uuids, and the last chain participant."""

    lines: list[str]
    uuids: list[str]
    last_participant: str | None
    predecessors: list[tuple[str, str | None]] = field(default_factory=list)
    """Each chain participant's uuid with the participant before it (where the chain stood before it was
    added): what the chain end goes back to when the participant's line is removed (a tombstone, R6.3)."""


def split_recorded_prefix(
    cleaned: Sequence[PersistableMessage], recorded: Collection[str], parent_hint: str | None
) -> NewMessages:
    """R7.7 step 3: a recorded message is skipped; while no new message has been seen, a recorded chain
    participant becomes the starting parent (a recorded *prefix*). After compaction the new boundary
    comes first, so re-kept old messages are not a prefix and do not move the parent."""
    starting_parent = parent_hint
    new: list[PersistableMessage] = []
    skipped: list[str] = []
    for message in cleaned:
        if message.uuid in recorded:
            skipped.append(message.uuid)
            if not new and is_chain_participant(message):
                starting_parent = message.uuid
            continue
        new.append(message)
    return NewMessages(new, skipped, starting_parent)


def build_chain_lines(
    messages: Sequence[PersistableMessage],
    starting_parent: str | None,
    *,
    stamp: dict[str, JsonValue | None],
    team: TeamInfo,
    agent_id: str | None,
    wires: LoggedWires | None = None,
) -> ChainLines:
    """R7.8 ``insertMessageChain``: a tool result's parent is its ``sourceToolAssistantUUID``; a compact
    boundary gets ``parentUuid: null`` and ``logicalParentUuid: <parent>`` (its own value wins); everything
    else hangs off the previous chain participant. ``agent_id`` marks sidechain lines (R7.9). A message
    ``wires`` holds is written from its wire object as logged (``logged_wire.py``), the others are dumped."""
    parent = starting_parent
    last: str | None = None
    lines: list[str] = []
    uuids: list[str] = []
    predecessors: list[tuple[str, str | None]] = []
    batch_chain = ChainFields(
        parent_uuid=None,
        is_sidechain=agent_id is not None,
        team_name=team.team_name,
        agent_name=team.agent_name,
        prompt_id=team.prompt_id,
        agent_id=agent_id,
    )
    template = LineTemplate(batch_chain, stamp)
    for message in messages:
        wire = wire_of(message, wires)
        if is_compact_boundary(message):
            line = template.line(wire, None, parent, with_logical_parent=True)
        else:
            effective = parent
            if isinstance(message, UserMessage) and message.source_tool_assistant_uuid:
                effective = message.source_tool_assistant_uuid
            line = template.line(wire, effective)
        lines.append(dumps_line(line))
        uuids.append(message.uuid)
        if is_chain_participant(message):
            predecessors.append((message.uuid, parent))
            parent = last = message.uuid
    return ChainLines(lines, uuids, last, predecessors)


def _preserved_segment(message: Message) -> tuple[str | None, str | None]:
    """``(headUuid, tailUuid)`` of a compact boundary's ``preservedSegment`` (R2.4b)."""
    metadata = field_or_none(message, "compact_metadata")
    segment = metadata.get("preservedSegment") if isinstance(metadata, dict) else None
    if not isinstance(segment, dict):
        return None, None
    head, tail = segment.get("headUuid"), segment.get("tailUuid")
    return (head if isinstance(head, str) else None), (tail if isinstance(tail, str) else None)


def _last_index(messages: Sequence[Message], uuid: str) -> int:
    for index in range(len(messages) - 1, -1, -1):
        if field_or_none(messages[index], "uuid") == uuid:
            return index
    return -1


def preserved_prelude(
    messages: Sequence[Message], history: Sequence[Message] | None, recorded: Collection[str]
) -> tuple[Sequence[Message], bool]:
    """R7.11 (headless): before a *new* compact boundary with a preserved segment is written, the
    in-memory messages up to the segment tail must be on disk (so the load-time relink, R7.17.1, can walk
    tail → head). Returns what to record first and whether it came from ``history`` (else it is the
    segment found after the boundary in the batch itself)."""
    for index, message in enumerate(messages):
        if not is_compact_boundary(message) or message.uuid in recorded:
            continue
        head, tail = _preserved_segment(message)
        if tail is None:
            continue
        if history is not None and (tail_index := _last_index(history, tail)) >= 0:
            return history[: tail_index + 1], True
        tail_index = _last_index(messages, tail)
        if tail_index <= index:
            continue  # already before the boundary: the natural order is right
        head_index = _last_index(messages, head) if head is not None else -1
        start = head_index if index < head_index <= tail_index else index + 1
        return messages[start : tail_index + 1], False
    return (), False
