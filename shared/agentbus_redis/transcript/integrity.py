"""Checking and repairing a transcript file's structure (R7.6, R7.8, R7.14, R7.18).

:func:`verify_transcript` lists every problem with its line numbers; :func:`repair_transcript`
returns new lines (the input is never edited) that drop malformed and duplicate lines and re-link
broken or cyclic parent chains. Untouched lines are returned byte for byte.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Literal

from agentbus_redis.messages.constants import SYNTHETIC_TOOL_RESULT_PLACEHOLDER
from agentbus_redis.messages.content import TextBlock, ToolResultBlock, ToolUseBlock
from agentbus_redis.messages.kinds import AssistantMessage, UserMessage
from agentbus_redis.messages.system import CompactBoundarySystemMessage
from agentbus_redis.transcript.lines import (
    OtherEntryLine,
    OtherMessageLine,
    is_message_line,
    is_progress_line,
    model_refusal,
)
from agentbus_redis.transcript.reader import NumberedLine, TranscriptParse
from agentbus_redis.transcript.unicode_text import escape_lone_surrogates

Severity = Literal["error", "warning"]
IssueKind = Literal[
    "malformed_line",
    "duplicate_uuid",
    "chain_break",
    "cycle",
    "unpaired_tool_use",
    "orphan_tool_result",
    "placeholder_result",
    "multiple_roots",
    "other_shape",
    "invalid_utf8",
    "lone_surrogate",
]
RepairKind = Literal["dropped_malformed", "dropped_duplicate", "reparented", "cycle_broken"]


@dataclass(frozen=True)
class IntegrityIssue:
    kind: IssueKind
    severity: Severity
    line_numbers: tuple[int, ...]
    detail: str
    uuid: str | None = None
    tool_use_id: str | None = None


@dataclass(frozen=True)
class IntegrityReport:
    issues: tuple[IntegrityIssue, ...]

    @property
    def errors(self) -> list[IntegrityIssue]:
        return [issue for issue in self.issues if issue.severity == "error"]

    @property
    def warnings(self) -> list[IntegrityIssue]:
        return [issue for issue in self.issues if issue.severity == "warning"]

    @property
    def ok(self) -> bool:
        """No error-severity issue (warnings describe states Claude Code itself copes with)."""
        return not self.errors

    def of_kind(self, kind: IssueKind) -> list[IntegrityIssue]:
        return [issue for issue in self.issues if issue.kind == kind]


@dataclass(frozen=True)
class RepairAction:
    kind: RepairKind
    line_number: int
    detail: str
    uuid: str | None = None


@dataclass(frozen=True)
class RepairResult:
    """``lines`` are JSONL lines without newline; ``report`` describes the input."""

    lines: list[str]
    report: IntegrityReport
    actions: tuple[RepairAction, ...]

    @property
    def text(self) -> str:
        """The repaired file: one line each, newline-terminated."""
        return "".join(f"{line}\n" for line in self.lines)


@dataclass(frozen=True)
class _Node:
    """The chain-relevant view of one message line."""

    line_number: int
    uuid: str
    parent: str | None
    lane: tuple[bool, str | None]
    """(isSidechain, agentId): a re-parented line only hangs off a line of its own conversation."""
    participant: bool
    boundary: bool


def _node(numbered: NumberedLine) -> _Node | None:
    line = numbered.line
    if not is_message_line(line):
        return None
    uuid, parent = getattr(line, "uuid", ""), getattr(line, "parent_uuid", None)
    return _Node(
        line_number=numbered.line_number,
        uuid=uuid,
        parent=parent,
        lane=(bool(getattr(line, "is_sidechain", False)), getattr(line, "agent_id", None)),
        participant=not is_progress_line(line),
        boundary=isinstance(line, CompactBoundarySystemMessage),
    )


def _first_occurrences(parse: TranscriptParse) -> tuple[list[_Node], list[tuple[_Node, _Node]]]:
    """Message nodes in file order keeping the first line of each uuid, plus (kept, duplicate) pairs."""
    kept: dict[str, _Node] = {}
    duplicates: list[tuple[_Node, _Node]] = []
    for numbered in parse.lines:
        node = _node(numbered)
        if node is None:
            continue
        if node.uuid in kept:
            duplicates.append((kept[node.uuid], node))
        else:
            kept[node.uuid] = node
    return list(kept.values()), duplicates


def _cycles(parents: dict[str, str | None]) -> list[list[str]]:
    """Every parentUuid cycle once, members in walk order."""
    state: dict[str, int] = {}
    found: list[list[str]] = []
    for start in parents:
        path: list[str] = []
        current: str | None = start
        while current is not None and current in parents and state.get(current, 0) == 0:
            state[current] = 1
            path.append(current)
            current = parents[current]
        if current is not None and state.get(current) == 1:
            found.append(path[path.index(current) :])
        for uuid in path:
            state[uuid] = 2
    return found


def _is_placeholder(block: ToolResultBlock) -> bool:
    content = block.content
    if isinstance(content, list):
        return (
            len(content) == 1
            and isinstance(content[0], TextBlock)
            and content[0].text == SYNTHETIC_TOOL_RESULT_PLACEHOLDER
        )
    return content == SYNTHETIC_TOOL_RESULT_PLACEHOLDER


def _tool_issues(lines: Iterable[NumberedLine]) -> list[IntegrityIssue]:
    uses: dict[str, list[int]] = {}
    results: dict[str, list[int]] = {}
    issues: list[IntegrityIssue] = []
    for numbered in lines:
        line = numbered.line
        if not isinstance(line, UserMessage | AssistantMessage):
            continue
        for block in line.blocks:
            if isinstance(block, ToolUseBlock):
                uses.setdefault(block.id, []).append(numbered.line_number)
            elif isinstance(block, ToolResultBlock):
                results.setdefault(block.tool_use_id, []).append(numbered.line_number)
                if _is_placeholder(block):
                    detail = f"tool_result {block.tool_use_id} is the synthetic placeholder (an earlier repair)"
                    issues.append(
                        IntegrityIssue(
                            "placeholder_result",
                            "warning",
                            (numbered.line_number,),
                            detail,
                            line.uuid,
                            block.tool_use_id,
                        )
                    )
    for tool_use_id, numbers in uses.items():
        if tool_use_id not in results:
            detail = f"tool_use {tool_use_id} has no tool_result anywhere"
            issues.append(IntegrityIssue("unpaired_tool_use", "warning", tuple(numbers), detail, None, tool_use_id))
    for tool_use_id, numbers in results.items():
        if tool_use_id not in uses:
            detail = f"tool_result {tool_use_id} answers no tool_use in this file"
            issues.append(IntegrityIssue("orphan_tool_result", "warning", tuple(numbers), detail, None, tool_use_id))
    return issues


def _root_issue(nodes: Sequence[_Node]) -> IntegrityIssue | None:
    """More than one main-chain root (compact boundaries are legitimate roots, R7.8); parents that
    are legacy progress lines are bridged first (R7.16)."""
    progress = {node.uuid: node.parent for node in nodes if not node.participant}

    def bridged(parent: str | None) -> str | None:
        seen: set[str] = set()
        while parent is not None and parent in progress and parent not in seen:
            seen.add(parent)
            parent = progress[parent]
        return parent

    roots = [
        node.line_number
        for node in nodes
        if node.participant and not node.lane[0] and not node.boundary and bridged(node.parent) is None
    ]
    if len(roots) < 2:
        return None
    return IntegrityIssue("multiple_roots", "warning", tuple(roots), f"{len(roots)} main-chain roots (parentUuid null)")


def _other_shape_issues(lines: Iterable[NumberedLine]) -> list[IntegrityIssue]:
    """Lines their model refuses: message lines are kept and walked through (R7.14) but never sent to
    the API; metadata lines are kept but not loaded."""
    issues: list[IntegrityIssue] = []
    for numbered in lines:
        line = numbered.line
        if isinstance(line, OtherMessageLine | OtherEntryLine):
            where = ", ".join(model_refusal(line)) or "<line>"
            kept = (
                "kept in the chain, left out of the API view"
                if isinstance(line, OtherMessageLine)
                else "kept, not loaded"
            )
            detail = f"{line.type} line its model refuses at {where}: {kept}"
            uuid = line.uuid if isinstance(line, OtherMessageLine) else None
            issues.append(IntegrityIssue("other_shape", "warning", (numbered.line_number,), detail, uuid))
    return issues


def verify_transcript(parse: TranscriptParse) -> IntegrityReport:
    """Every structural problem of a parsed file, with the line numbers involved."""
    issues = [IntegrityIssue("malformed_line", "error", (error.line_number,), str(error)) for error in parse.errors]
    issues.extend(
        IntegrityIssue(warning.kind, "warning", (warning.line_number,), warning.detail) for warning in parse.warnings
    )
    issues.extend(_other_shape_issues(parse.lines))
    nodes, duplicates = _first_occurrences(parse)
    by_number = {numbered.line_number: numbered.line for numbered in parse.lines} if duplicates else {}
    for kept, duplicate in duplicates:
        same = by_number[kept.line_number].to_wire() == by_number[duplicate.line_number].to_wire()
        detail = f"uuid {kept.uuid} repeats line {kept.line_number}" + (" (identical)" if same else "")
        issues.append(
            IntegrityIssue(
                "duplicate_uuid",
                "warning" if same else "error",
                (kept.line_number, duplicate.line_number),
                detail,
                kept.uuid,
            )
        )
    known = {node.uuid for node in nodes}
    for node in nodes:
        if node.parent is not None and node.parent not in known:
            # A sub-agent's first line may hang off the parent session's chain (it forks from it).
            forked = node.lane[0]
            detail = f"parentUuid {node.parent} is not in the file" + (" (sidechain: forked off?)" if forked else "")
            severity: Severity = "warning" if forked else "error"
            issues.append(IntegrityIssue("chain_break", severity, (node.line_number,), detail, node.uuid))
    by_uuid = {node.uuid: node for node in nodes}
    for cycle in _cycles({node.uuid: node.parent for node in nodes}):
        numbers = tuple(sorted(by_uuid[uuid].line_number for uuid in cycle))
        issues.append(
            IntegrityIssue("cycle", "error", numbers, f"parentUuid cycle through {len(cycle)} line(s)", cycle[0])
        )
    root_issue = _root_issue(nodes)
    if root_issue is not None:
        issues.append(root_issue)
    issues.extend(_tool_issues(parse.lines))
    return IntegrityReport(issues=tuple(issues))


def _reparented(raw: str, parent: str | None) -> str:
    """The line with ``parentUuid`` replaced in place (key order kept; compact JSON)."""
    value = json.loads(raw)
    value = value | {"parentUuid": parent} if "parentUuid" in value else {"parentUuid": parent, **value}
    return escape_lone_surrogates(json.dumps(value, ensure_ascii=False, separators=(",", ":")))


def _reaches(parents: dict[str, str | None], start: str | None, target: str) -> bool:
    seen: set[str] = set()
    while start is not None and start not in seen:
        if start == target:
            return True
        seen.add(start)
        start = parents.get(start)
    return False


def repair_transcript(parse: TranscriptParse) -> RepairResult:
    """Drop malformed lines and later duplicates of a uuid (the first line is kept), re-parent each
    main-chain break to the nearest previous chain participant of the same conversation (or null), and
    break each cycle at its earliest line the same way. Sidechain lines whose parent lives in the
    parent session are left alone (a warning, not an error). Returns new lines; ``parse`` is unchanged."""
    report = verify_transcript(parse)
    actions = [RepairAction("dropped_malformed", error.line_number, str(error)) for error in parse.errors]
    nodes, duplicates = _first_occurrences(parse)
    dropped = {duplicate.line_number for _, duplicate in duplicates}
    actions.extend(
        RepairAction("dropped_duplicate", dup.line_number, f"repeats uuid of line {kept.line_number}", dup.uuid)
        for kept, dup in duplicates
    )
    known = {node.uuid for node in nodes}
    parents = {node.uuid: node.parent for node in nodes}
    previous: dict[str, str | None] = {}
    last_in_lane: dict[tuple[bool, str | None], str] = {}
    for node in nodes:
        previous[node.uuid] = last_in_lane.get(node.lane)
        if node.parent is not None and node.parent not in known and not node.lane[0]:
            parents[node.uuid] = previous[node.uuid]
            actions.append(
                RepairAction("reparented", node.line_number, f"{node.parent} → {previous[node.uuid]}", node.uuid)
            )
        if node.participant:
            last_in_lane[node.lane] = node.uuid
    by_uuid = {node.uuid: node for node in nodes}
    for cycle in _cycles(parents):
        earliest = min(cycle, key=lambda uuid: by_uuid[uuid].line_number)
        parents[earliest] = None
        candidate = previous[earliest]
        if candidate is not None and not _reaches(parents, candidate, earliest):
            parents[earliest] = candidate
        detail = f"cycle of {len(cycle)} cut: parentUuid → {parents[earliest]}"
        actions.append(RepairAction("cycle_broken", by_uuid[earliest].line_number, detail, earliest))
    lines: list[str] = []
    for numbered in parse.lines:
        if numbered.line_number in dropped:
            continue
        own = by_uuid.get(getattr(numbered.line, "uuid", "")) if is_message_line(numbered.line) else None
        if own is not None and own.line_number == numbered.line_number and parents[own.uuid] != own.parent:
            lines.append(_reparented(numbered.raw, parents[own.uuid]))
        else:
            lines.append(numbered.raw.strip())
    actions.sort(key=lambda action: action.line_number)
    return RepairResult(lines=lines, report=report, actions=tuple(actions))
