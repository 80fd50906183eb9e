"""Loading a parsed transcript into a :class:`Transcript` (R7.14–R7.17, ``loadTranscriptFile``).

Messages go into a map by uuid (a repeated uuid overwrites the value but keeps its first position),
legacy progress lines are bridged (R7.16), metadata entries fill per-session maps (last one wins),
then the preserved-segment relink (R7.17.1), snip removals (R7.17.2) and the leaf computation
(R7.17.3) run in that order.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from agentbus_redis.json_types import JsonValue
from agentbus_redis.messages.kinds import AssistantMessage, AttachmentMessage, ProgressMessage, UserMessage
from agentbus_redis.messages.system import CompactBoundarySystemMessage, SystemMessageBase
from agentbus_redis.transcript.fixups import (
    MessageMap,
    RelinkOutcome,
    TranscriptMessage,
    apply_preserved_segment_relinks,
    apply_snip_removals,
    bridge_progress_parent,
    with_parent,
)
from agentbus_redis.transcript.lines import (
    AgentColorLine,
    AgentNameLine,
    AgentSettingLine,
    AiTitleLine,
    AttributionSnapshotLine,
    ContentReplacementLine,
    ContextCollapseCommitLine,
    ContextCollapseSnapshotLine,
    CustomTitleLine,
    FileHistorySnapshotLine,
    LastPromptLine,
    ModeLine,
    OtherMessageLine,
    PrLinkLine,
    SummaryLine,
    TagLine,
    TaskSummaryLine,
    TranscriptLine,
    WorktreeStateLine,
    is_progress_line,
)
from agentbus_redis.transcript.reader import TranscriptParse


@dataclass(frozen=True)
class Transcript:
    """A loaded session file. ``messages`` is in file position order; maps keyed by session are
    keyed by ``sessionId`` (look them up with the *leaf's* sessionId, R7.21)."""

    messages: Mapping[str, TranscriptMessage]
    line_numbers: Mapping[str, int]
    """uuid → line number of the line whose value won (the last one with that uuid)."""
    leaf_uuids: tuple[str, ...]
    """R7.17.3, in message position order."""
    has_cycle: bool = False
    relink: RelinkOutcome = "none"
    summaries: Mapping[str, str] = field(default_factory=dict)
    """leafUuid → summary text."""
    custom_titles: Mapping[str, str] = field(default_factory=dict)
    ai_titles: Mapping[str, str] = field(default_factory=dict)
    last_prompts: Mapping[str, str] = field(default_factory=dict)
    task_summaries: Mapping[str, str] = field(default_factory=dict)
    tags: Mapping[str, str] = field(default_factory=dict)
    agent_names: Mapping[str, str] = field(default_factory=dict)
    agent_colors: Mapping[str, str] = field(default_factory=dict)
    agent_settings: Mapping[str, str] = field(default_factory=dict)
    modes: Mapping[str, str] = field(default_factory=dict)
    worktree_states: Mapping[str, JsonValue] = field(default_factory=dict)
    pr_links: Mapping[str, PrLinkLine] = field(default_factory=dict)
    file_history_snapshots: Mapping[str, FileHistorySnapshotLine] = field(default_factory=dict)
    """messageId → snapshot entry."""
    attribution_snapshots: Mapping[str, AttributionSnapshotLine] = field(default_factory=dict)
    content_replacements: Mapping[str, tuple[JsonValue, ...]] = field(default_factory=dict)
    agent_content_replacements: Mapping[str, tuple[JsonValue, ...]] = field(default_factory=dict)
    context_collapse_commits: tuple[ContextCollapseCommitLine, ...] = ()
    """Commits after the last compact boundary, in file order."""
    context_collapse_snapshot: ContextCollapseSnapshotLine | None = None
    bridged_progress_children: int = 0
    """How many messages were re-parented across legacy progress lines (R7.16)."""

    def message(self, uuid: str) -> TranscriptMessage | None:
        return self.messages.get(uuid)


_SESSION_STRING_MAPS: dict[type, tuple[str, str]] = {
    CustomTitleLine: ("custom_titles", "custom_title"),
    AiTitleLine: ("ai_titles", "ai_title"),
    LastPromptLine: ("last_prompts", "last_prompt"),
    TaskSummaryLine: ("task_summaries", "summary"),
    TagLine: ("tags", "tag"),
    AgentNameLine: ("agent_names", "agent_name"),
    AgentColorLine: ("agent_colors", "agent_color"),
    AgentSettingLine: ("agent_settings", "agent_setting"),
    ModeLine: ("modes", "mode"),
}


class _Loading:
    """Mutable accumulator of one load pass; turned into a frozen :class:`Transcript` at the end."""

    def __init__(self) -> None:
        self.messages: MessageMap = {}
        self.line_numbers: dict[str, int] = {}
        self.progress_bridge: dict[str, str | None] = {}
        self.bridged = 0
        self.string_maps: dict[str, dict[str, str]] = {name: {} for name, _ in _SESSION_STRING_MAPS.values()}
        self.summaries: dict[str, str] = {}
        self.worktree_states: dict[str, JsonValue] = {}
        self.pr_links: dict[str, PrLinkLine] = {}
        self.file_history: dict[str, FileHistorySnapshotLine] = {}
        self.attribution: dict[str, AttributionSnapshotLine] = {}
        self.replacements: dict[str, list[JsonValue]] = {}
        self.agent_replacements: dict[str, list[JsonValue]] = {}
        self.commits: list[ContextCollapseCommitLine] = []
        self.snapshot: ContextCollapseSnapshotLine | None = None

    def add_message(self, message: TranscriptMessage, line_number: int) -> None:
        """R7.14 + R7.16: bridge a progress parent, then store (first position, last value)."""
        parent = bridge_progress_parent(self.progress_bridge, message.parent_uuid)
        if parent != message.parent_uuid:
            message = with_parent(message, parent)
            self.bridged += 1
        self.messages[message.uuid] = message
        self.line_numbers[message.uuid] = line_number
        if isinstance(message, CompactBoundarySystemMessage):
            # Collapse commits before a boundary reference messages the post-boundary chain lacks.
            self.commits.clear()
            self.snapshot = None

    def add_progress(self, progress: ProgressMessage | OtherMessageLine) -> None:
        """R7.16: remember where a legacy progress line's children must hang instead."""
        self.progress_bridge[progress.uuid] = bridge_progress_parent(self.progress_bridge, progress.parent_uuid)

    def add_metadata(self, line: TranscriptLine) -> None:
        """R7.14: per-session metadata maps, last one wins (entries without their key are ignored)."""
        if isinstance(line, SummaryLine):
            if line.leaf_uuid and line.summary is not None:
                self.summaries[line.leaf_uuid] = line.summary
        elif type(line) in _SESSION_STRING_MAPS:
            name, attribute = _SESSION_STRING_MAPS[type(line)]
            session_id, value = getattr(line, "session_id", None), getattr(line, attribute, None)
            if session_id and isinstance(value, str):
                self.string_maps[name][session_id] = value
        elif isinstance(line, WorktreeStateLine):
            if line.session_id:
                self.worktree_states[line.session_id] = line.worktree_session
        elif isinstance(line, PrLinkLine):
            if line.session_id:
                self.pr_links[line.session_id] = line
        elif isinstance(line, FileHistorySnapshotLine):
            if line.message_id is not None:
                self.file_history[line.message_id] = line
        elif isinstance(line, AttributionSnapshotLine):
            if line.message_id is not None:
                self.attribution[line.message_id] = line
        elif isinstance(line, ContentReplacementLine):
            self._add_replacements(line)
        elif isinstance(line, ContextCollapseCommitLine):
            self.commits.append(line)
        elif isinstance(line, ContextCollapseSnapshotLine):
            self.snapshot = line

    def _add_replacements(self, line: ContentReplacementLine) -> None:
        records = list(line.replacements or [])
        if line.agent_id:
            self.agent_replacements.setdefault(line.agent_id, []).extend(records)
        elif line.session_id:
            self.replacements.setdefault(line.session_id, []).extend(records)


def is_user_or_assistant(message: TranscriptMessage) -> bool:
    """A user or assistant line, an other-shaped one included (Claude Code tests ``type`` alone)."""
    if isinstance(message, OtherMessageLine):
        return message.type in ("user", "assistant")
    return isinstance(message, UserMessage | AssistantMessage)


def compute_leaf_uuids(
    messages: Mapping[str, TranscriptMessage], *, prune: bool = False
) -> tuple[tuple[str, ...], bool]:
    """R7.17.3: from every terminal message (nobody's parent) walk up to the first user/assistant
    message; that uuid is a leaf. Returns the leaves in position order and whether a cycle was met.

    ``prune`` is the ``tengu_pebble_leaf_prune`` gate (default off): ancestors that already have a
    user/assistant child are skipped."""
    parents = {message.parent_uuid for message in messages.values() if message.parent_uuid is not None}
    has_ua_child = {
        message.parent_uuid for message in messages.values() if message.parent_uuid and is_user_or_assistant(message)
    }
    leaves: set[str] = set()
    has_cycle = False
    for terminal in (message for uuid, message in messages.items() if uuid not in parents):
        seen: set[str] = set()
        current: TranscriptMessage | None = terminal
        while current is not None:
            if current.uuid in seen:
                has_cycle = True
                break
            seen.add(current.uuid)
            if is_user_or_assistant(current):
                if not (prune and current.uuid in has_ua_child):
                    leaves.add(current.uuid)
                break
            current = messages.get(current.parent_uuid) if current.parent_uuid else None
    return tuple(uuid for uuid in messages if uuid in leaves), has_cycle


def build_transcript(source: TranscriptParse | Iterable[TranscriptLine], *, prune_leaves: bool = False) -> Transcript:
    """Load a parsed file (or plain lines, numbered from 1) per R7.14–R7.17."""
    numbered = (
        [(item.line_number, item.line) for item in source.lines]
        if isinstance(source, TranscriptParse)
        else list(enumerate(source, start=1))
    )
    loading = _Loading()
    for line_number, line in numbered:
        if isinstance(line, ProgressMessage | OtherMessageLine) and is_progress_line(line):
            loading.add_progress(line)
        elif isinstance(
            line, UserMessage | AssistantMessage | AttachmentMessage | SystemMessageBase | OtherMessageLine
        ):
            loading.add_message(line, line_number)
        else:
            loading.add_metadata(line)
    messages, relink = apply_preserved_segment_relinks(loading.messages)
    messages = apply_snip_removals(messages)
    leaves, has_cycle = compute_leaf_uuids(messages, prune=prune_leaves)
    maps = loading.string_maps
    return Transcript(
        messages=messages,
        line_numbers={uuid: loading.line_numbers[uuid] for uuid in messages},
        leaf_uuids=leaves,
        has_cycle=has_cycle,
        relink=relink,
        summaries=loading.summaries,
        custom_titles=maps["custom_titles"],
        ai_titles=maps["ai_titles"],
        last_prompts=maps["last_prompts"],
        task_summaries=maps["task_summaries"],
        tags=maps["tags"],
        agent_names=maps["agent_names"],
        agent_colors=maps["agent_colors"],
        agent_settings=maps["agent_settings"],
        modes=maps["modes"],
        worktree_states=loading.worktree_states,
        pr_links=loading.pr_links,
        file_history_snapshots=loading.file_history,
        attribution_snapshots=loading.attribution,
        content_replacements={key: tuple(value) for key, value in loading.replacements.items()},
        agent_content_replacements={key: tuple(value) for key, value in loading.agent_replacements.items()},
        context_collapse_commits=tuple(loading.commits),
        context_collapse_snapshot=loading.snapshot,
        bridged_progress_children=loading.bridged,
    )
