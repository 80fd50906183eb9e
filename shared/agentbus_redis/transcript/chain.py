"""Conversation chains of a loaded transcript: leaf selection (R7.19), the parent walk with
recovery of orphaned parallel tool results (R7.18), sub-agent chains, and R7.19's
``removeExtraFields``.

A compact boundary has ``parentUuid: null`` (R7.8), so a walk from a post-compaction leaf stops at
the boundary: the chain starts with ``[boundary, summary, …]``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Literal

from agentbus_redis.errors import BrokenTranscriptChain
from agentbus_redis.json_types import JsonValue
from agentbus_redis.messages.content import ToolResultBlock
from agentbus_redis.messages.kinds import AssistantMessage, UserMessage
from agentbus_redis.transcript.fixups import TranscriptMessage
from agentbus_redis.transcript.lines import OtherMessageLine, PrLinkLine
from agentbus_redis.transcript.loader import Transcript
from agentbus_redis.wire import without_fields

LeafMode = Literal["jsonl_path", "session_id", "picker"]
"""R7.19 entry points: ``jsonl_path`` = ``--resume path/to/file.jsonl`` (latest non-sidechain leaf);
``session_id`` = ``--resume <sessionId>`` (latest non-sidechain message of any kind, leaf or not);
``picker`` = ``/resume`` picker and ``--continue`` (latest leaf, sidechains not excluded)."""


def timestamp_ms(timestamp: str | None) -> float | None:
    """Milliseconds since the epoch of an ISO-8601 timestamp, like ``Date.parse`` (None when it does
    not parse or is absent, where JavaScript gets NaN). A timestamp without an offset is read as UTC."""
    if timestamp is None:
        return None
    try:
        moment = datetime.fromisoformat(timestamp)
    except ValueError:
        return None
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return moment.timestamp() * 1000


def _latest(
    messages: Iterable[TranscriptMessage], predicate: Callable[[TranscriptMessage], bool], floor: float
) -> TranscriptMessage | None:
    """``findLatestMessage``: the first message with the strictly greatest timestamp above ``floor``;
    unparsable timestamps never win."""
    latest: TranscriptMessage | None = None
    best = floor
    for message in messages:
        if not predicate(message):
            continue
        moment = timestamp_ms(message.timestamp)
        if moment is not None and moment > best:
            best, latest = moment, message
    return latest


def select_leaf(transcript: Transcript, mode: LeafMode = "jsonl_path") -> TranscriptMessage | None:
    """R7.19: the message a resume walks back from, or None when the file has no usable chain."""
    leaves = set(transcript.leaf_uuids)
    messages = transcript.messages.values()
    if mode == "session_id":
        return _latest(messages, lambda m: not m.is_sidechain, float("-inf"))
    if mode == "picker":
        return _latest(messages, lambda m: m.uuid in leaves, float("-inf"))
    # loadMessagesFromJsonlPath starts its maximum at 0, so only post-epoch timestamps qualify.
    return _latest(messages, lambda m: m.uuid in leaves and not m.is_sidechain, 0.0)


def _walk_to_root(messages: Mapping[str, TranscriptMessage], leaf: TranscriptMessage) -> list[TranscriptMessage]:
    """Follow parentUuid from ``leaf`` to a root (null or missing parent), stopping on a cycle."""
    walked: list[TranscriptMessage] = []
    seen: set[str] = set()
    current: TranscriptMessage | None = leaf
    while current is not None and current.uuid not in seen:
        seen.add(current.uuid)
        walked.append(current)
        current = messages.get(current.parent_uuid) if current.parent_uuid else None
    walked.reverse()
    return walked


def _has_tool_result(message: UserMessage) -> bool:
    content = message.message.content
    return not isinstance(content, str) and any(isinstance(block, ToolResultBlock) for block in content)


def _timestamp_text(message: TranscriptMessage) -> str:
    return message.timestamp or ""


def recover_orphaned_parallel_tool_results(
    messages: Mapping[str, TranscriptMessage], chain: Sequence[TranscriptMessage]
) -> list[TranscriptMessage]:
    """R7.18 post-pass: parallel tool_uses are written as one line each (same ``message.id``), and each
    result hangs off its own line, so a single-parent walk keeps only one branch. For every
    ``message.id`` group touching the chain, insert the off-chain group members, then the off-chain
    tool_result users whose parent is any member (each sorted by timestamp, stable), right after the
    group's last on-chain member."""
    on_chain = {message.uuid for message in chain}
    chain_assistants = [message for message in chain if isinstance(message, AssistantMessage)]
    anchor_by_id: dict[str, str] = {}
    for assistant in chain_assistants:
        if assistant.message.id:
            anchor_by_id[assistant.message.id] = assistant.uuid
    if not anchor_by_id:
        return list(chain)
    group_by_id: dict[str, list[TranscriptMessage]] = {}
    results_by_parent: dict[str, list[TranscriptMessage]] = {}
    for message in messages.values():
        if isinstance(message, AssistantMessage) and message.message.id:
            group_by_id.setdefault(message.message.id, []).append(message)
        elif isinstance(message, UserMessage) and message.parent_uuid and _has_tool_result(message):
            results_by_parent.setdefault(message.parent_uuid, []).append(message)
    inserts: dict[str, list[TranscriptMessage]] = {}
    processed: set[str] = set()
    for assistant in chain_assistants:
        group_id = assistant.message.id
        if not group_id or group_id in processed:
            continue
        processed.add(group_id)
        group = group_by_id.get(group_id, [assistant])
        siblings = [member for member in group if member.uuid not in on_chain]
        results = [
            result
            for member in group
            for result in results_by_parent.get(member.uuid, [])
            if result.uuid not in on_chain
        ]
        if not siblings and not results:
            continue
        recovered = sorted(siblings, key=_timestamp_text) + sorted(results, key=_timestamp_text)
        on_chain.update(message.uuid for message in recovered)
        inserts[anchor_by_id[group_id]] = recovered
    if not inserts:
        return list(chain)
    rebuilt: list[TranscriptMessage] = []
    for message in chain:
        rebuilt.append(message)
        rebuilt.extend(inserts.get(message.uuid, []))
    return rebuilt


def build_conversation_chain(transcript: Transcript, leaf_uuid: str) -> list[TranscriptMessage]:
    """R7.18 ``buildConversationChain``: root → leaf, plus recovered parallel tool results.

    Raises :class:`BrokenTranscriptChain` when ``leaf_uuid`` is not a loaded message."""
    leaf = transcript.messages.get(leaf_uuid)
    if leaf is None:
        raise BrokenTranscriptChain(leaf_uuid, f"leaf {leaf_uuid!r} is not a message of this transcript")
    return recover_orphaned_parallel_tool_results(transcript.messages, _walk_to_root(transcript.messages, leaf))


def main_chain(transcript: Transcript, mode: LeafMode = "jsonl_path") -> list[TranscriptMessage]:
    """The chain a resume through entry point ``mode`` would load (``[]`` when there is no leaf)."""
    leaf = select_leaf(transcript, mode)
    return build_conversation_chain(transcript, leaf.uuid) if leaf is not None else []


def subagent_chain(transcript: Transcript, agent_id: str | None = None) -> list[TranscriptMessage]:
    """A sub-agent transcript's chain (``getAgentTranscript``): among sidechain messages (of
    ``agent_id`` when given), the latest one that is no other's parent is the leaf; the walked chain
    keeps only that agent's messages. Sub-agent files root at ``parentUuid: null`` (R7.1)."""
    agent_messages = [
        message
        for message in transcript.messages.values()
        if message.is_sidechain and (agent_id is None or message.agent_id == agent_id)
    ]
    parents = {message.parent_uuid for message in agent_messages}
    leaf = _latest(agent_messages, lambda m: m.uuid not in parents, float("-inf"))
    if leaf is None:
        return []
    chain = build_conversation_chain(transcript, leaf.uuid)
    wanted = agent_id if agent_id is not None else leaf.agent_id
    return [message for message in chain if message.agent_id == wanted] if wanted is not None else chain


_CHAIN_FIELDS = ("parent_uuid", "is_sidechain")
_CHAIN_KEYS = ("parentUuid", "isSidechain")


def _without_chain_fields(message: TranscriptMessage) -> TranscriptMessage:
    if isinstance(message, OtherMessageLine):
        # Only ``parentUuid`` is a field of an other-shaped line; ``isSidechain`` is one of its extras.
        wire = message.to_wire()
        if wire.keys().isdisjoint(_CHAIN_KEYS):
            return message
        return OtherMessageLine.model_validate({key: value for key, value in wire.items() if key not in _CHAIN_KEYS})
    if message.model_fields_set.isdisjoint(_CHAIN_FIELDS):
        return message
    return without_fields(message, *_CHAIN_FIELDS)


def remove_chain_fields(messages: Iterable[TranscriptMessage]) -> list[TranscriptMessage]:
    """R7.19 ``removeExtraFields``: drop ``parentUuid`` and ``isSidechain``; the rest of the envelope
    (cwd, sessionId, version…) stays."""
    return [_without_chain_fields(message) for message in messages]


@dataclass(frozen=True)
class SessionMetadata:
    """The per-session metadata of R7.4, looked up by the leaf's sessionId (R7.21)."""

    session_id: str | None
    summary: str | None = None
    custom_title: str | None = None
    ai_title: str | None = None
    last_prompt: str | None = None
    tag: str | None = None
    agent_name: str | None = None
    agent_color: str | None = None
    agent_setting: str | None = None
    mode: str | None = None
    worktree_state: JsonValue = None
    pr_link: PrLinkLine | None = None


def session_metadata(transcript: Transcript, leaf: TranscriptMessage) -> SessionMetadata:
    """Metadata for the conversation ending at ``leaf``: ``summary`` is keyed by the leaf uuid, the
    rest by the leaf's sessionId (never the root's: fork files keep the source id on the root)."""
    sid = leaf.session_id
    if sid is None:
        return SessionMetadata(session_id=None, summary=transcript.summaries.get(leaf.uuid))
    return SessionMetadata(
        session_id=sid,
        summary=transcript.summaries.get(leaf.uuid),
        custom_title=transcript.custom_titles.get(sid),
        ai_title=transcript.ai_titles.get(sid),
        last_prompt=transcript.last_prompts.get(sid),
        tag=transcript.tags.get(sid),
        agent_name=transcript.agent_names.get(sid),
        agent_color=transcript.agent_colors.get(sid),
        agent_setting=transcript.agent_settings.get(sid),
        mode=transcript.modes.get(sid),
        worktree_state=transcript.worktree_states.get(sid),
        pr_link=transcript.pr_links.get(sid),
    )
