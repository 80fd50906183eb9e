"""Checking and repairing a pi session file (P7, P8, P9): the pi side of ``agentbus transcript verify|repair``.

:func:`verify_pi_session` reports the tree's integrity (duplicate ids, cycles, dangling parents, P7.5/P8.2)
and the tool pairing of the context pi rebuilds at the leaf (P8): calls without a result (P5.6 inserts
``No result provided``, P9.6), failed turns (P5.6 b drops them, P9.3–P9.5), and results pi would send as they
are although the API rejects them — late (P9.2), duplicate and orphan results (P5.8: pi removes neither).

:func:`repair_pi_session` is conservative: it never edits a message, only the tree around it. It drops the
lines pi skips anyway (malformed) and later lines that reuse an id, breaks a cycle by making its first entry
in file order a root, moves a late result up to its call (right after the call's results, P9.2's advice:
"move a late tool result up to its call"), and takes a duplicate or orphan result of the context out of the
path (its children hang on its parent). Everything else — calls without results, failed turns — pi's own
``transformMessages`` copes with (P5.6) and stays as recorded.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass, replace
from typing import Literal

from agentbus_redis.pi.context import build_session_context
from agentbus_redis.pi.entries import PiEntry, PiMessageEntry
from agentbus_redis.pi.messages import PiAssistantMessage, PiMessage, PiToolResultMessage
from agentbus_redis.pi.session import PiSession

Severity = Literal["error", "warning"]
PiIssueKind = Literal[
    "malformed_line",
    "invalid_utf8",
    "duplicate_id",
    "cycle",
    "dangling_parent",
    "unanswered_call",
    "failed_turn",
    "late_result",
    "duplicate_result",
    "orphan_result",
]
PiRepairKind = Literal[
    "dropped_malformed", "dropped_duplicate", "cycle_broken", "moved_late_result", "dropped_duplicate_result",
    "dropped_orphan_result",
]  # fmt: skip


@dataclass(frozen=True, slots=True)
class PiIssue:
    kind: PiIssueKind
    severity: Severity
    line_numbers: tuple[int, ...]
    detail: str
    entry_id: str | None = None
    tool_call_id: str | None = None


@dataclass(frozen=True, slots=True)
class PiIntegrityReport:
    issues: tuple[PiIssue, ...]

    @property
    def errors(self) -> list[PiIssue]:
        return [issue for issue in self.issues if issue.severity == "error"]

    @property
    def warnings(self) -> list[PiIssue]:
        return [issue for issue in self.issues if issue.severity == "warning"]

    @property
    def ok(self) -> bool:
        """No error: the tree is sound and pi's own request from the leaf has no misplaced result."""
        return not self.errors

    def of_kind(self, kind: PiIssueKind) -> list[PiIssue]:
        return [issue for issue in self.issues if issue.kind == kind]


@dataclass(frozen=True, slots=True)
class PiRepairAction:
    kind: PiRepairKind
    line_number: int
    detail: str


@dataclass(frozen=True, slots=True)
class PiRepairResult:
    session: PiSession
    actions: list[PiRepairAction]


# -- the tree -----------------------------------------------------------------------------------------------


def _duplicate_ids(session: PiSession) -> dict[str, list[int]]:
    lines: dict[str, list[int]] = {}
    for entry, line in zip(session.entries, session.lines, strict=True):
        if entry.id is not None:
            lines.setdefault(entry.id, []).append(line)
    return {entry_id: numbers for entry_id, numbers in lines.items() if len(numbers) > 1}


def _cycles(entries: Sequence[PiEntry]) -> list[list[int]]:
    """Each cycle of ``parentId`` links as entry indexes (first in file order first)."""
    index_of = {entry.id: index for index, entry in enumerate(entries) if entry.id is not None}
    state = [0] * len(entries)  # 0 unseen, 1 on the current walk, 2 done
    cycles: list[list[int]] = []
    for start in range(len(entries)):
        walk: list[int] = []
        current: int | None = start
        while current is not None and state[current] == 0:
            state[current] = 1
            walk.append(current)
            parent = entries[current].parent_id
            current = index_of.get(parent) if parent is not None else None
        if current is not None and state[current] == 1:
            cycles.append(sorted(walk[walk.index(current) :]))
        for index in walk:
            state[index] = 2
    return cycles


# -- the context's tool pairing -------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class _PairingFinding:
    kind: Literal["unanswered_call", "failed_turn", "late_result", "duplicate_result", "orphan_result"]
    message: PiMessage
    call_id: str | None
    detail: str


def _pairing(messages: Sequence[PiMessage]) -> Iterator[_PairingFinding]:
    """Walk the context as P5.6 does and name what the API would refuse if sent as it stands."""
    calls: dict[str, int] = {}  # call id -> index of its assistant message
    answered: set[str] = set()
    failed: set[str] = set()
    run_of: int | None = None  # index of the assistant whose results may follow now
    open_calls: list[str] = []
    for index, message in enumerate(messages):
        if isinstance(message, PiToolResultMessage):
            call_id = message.tool_call_id
            if call_id in answered:
                yield _PairingFinding("duplicate_result", message, call_id, f"second result for {call_id}")
            elif call_id in calls and calls[call_id] != run_of:
                detail = f"result for {call_id} comes after other messages; pi sends it misplaced (P9.2)"
                yield _PairingFinding("late_result", message, call_id, detail)
            elif call_id not in calls:
                why = "its call is in a failed turn pi drops (P5.6 b)" if call_id in failed else "no call before it"
                yield _PairingFinding("orphan_result", message, call_id, f"result for {call_id}: {why}")
            answered.add(call_id)
            continue
        for call_id in open_calls:
            if call_id not in answered:
                detail = f"{call_id} has no result before the next message (pi: {'No result provided'!r}, P5.6)"
                yield _PairingFinding("unanswered_call", messages[run_of or 0], call_id, detail)
        open_calls = []
        run_of = None
        if isinstance(message, PiAssistantMessage):
            ids = [call.id for call in message.tool_calls()]
            if message.failed:
                failed.update(ids)
                detail = f"stopReason {message.stop_reason} with {len(ids)} call(s): dropped from requests (P5.6 b)"
                yield _PairingFinding("failed_turn", message, None, detail)
                continue
            calls.update(dict.fromkeys(ids, index))
            run_of, open_calls = index, ids
    for call_id in open_calls:
        if call_id not in answered and run_of is not None:
            yield _PairingFinding("unanswered_call", messages[run_of], call_id, f"{call_id} has no result yet")


_SEVERITY: dict[str, Severity] = {
    "unanswered_call": "warning",
    "failed_turn": "warning",
    "late_result": "error",
    "duplicate_result": "error",
    "orphan_result": "error",
}


def _message_entries(session: PiSession) -> dict[int, tuple[PiEntry, int]]:
    return {
        id(entry.message): (entry, line)
        for entry, line in zip(session.entries, session.lines, strict=True)
        if isinstance(entry, PiMessageEntry)
    }


def verify_pi_session(session: PiSession) -> PiIntegrityReport:
    """Every problem of the file, with its line numbers (1-based, the header is line 1)."""
    issues: list[PiIssue] = []
    for problem in session.problems:
        kind: PiIssueKind = "invalid_utf8" if problem.kind == "invalid_utf8" else "malformed_line"
        severity: Severity = "warning" if kind == "invalid_utf8" else "error"
        issues.append(PiIssue(kind, severity, (problem.line,), f"{problem.kind}: {problem.detail}"))
    for entry_id, numbers in _duplicate_ids(session).items():
        issues.append(PiIssue("duplicate_id", "error", tuple(numbers), f"id {entry_id} is used {len(numbers)} times"))
    for cycle in _cycles(session.entries):
        issues.append(
            PiIssue(
                "cycle",
                "error",
                tuple(session.lines[index] for index in cycle),
                f"parentId links form a cycle of {len(cycle)} entries",
            )
        )
    known = {entry.id for entry in session.entries if entry.id is not None}
    for entry, line in zip(session.entries, session.lines, strict=True):
        if entry.parent_id is not None and entry.parent_id not in known:
            detail = f"parentId {entry.parent_id} names no entry; pi treats the entry as a root (P8.2)"
            issues.append(PiIssue("dangling_parent", "warning", (line,), detail, entry_id=entry.id))
    entries_of = _message_entries(session)
    for finding in _pairing(build_session_context(session.entries).messages):
        found = entries_of.get(id(finding.message))
        issues.append(
            PiIssue(
                finding.kind,
                _SEVERITY[finding.kind],
                (found[1],) if found else (),
                finding.detail,
                entry_id=found[0].id if found else None,
                tool_call_id=finding.call_id,
            )
        )
    issues.sort(key=lambda issue: issue.line_numbers[:1] or (0,))
    return PiIntegrityReport(tuple(issues))


# -- repair ---------------------------------------------------------------------------------------------------


def _with(session: PiSession, rows: list[tuple[PiEntry, int, str | None]]) -> PiSession:
    return replace(
        session,
        entries=[entry for entry, _, _ in rows],
        lines=[line for _, line, _ in rows],
        raw_entries=[raw for _, _, raw in rows],
        problems=[],
    )


def _rows(session: PiSession) -> list[tuple[PiEntry, int, str | None]]:
    raws: Sequence[str | None] = session.raw_entries or [None] * len(session.entries)
    return list(zip(session.entries, session.lines, raws, strict=True))


def _reparent(entry: PiEntry, parent: str | None) -> PiEntry:
    return entry.model_copy(update={"parent_id": parent})


def _fix_tree(session: PiSession, actions: list[PiRepairAction]) -> list[tuple[PiEntry, int, str | None]]:
    for problem in session.problems:
        if problem.kind != "invalid_utf8":
            actions.append(PiRepairAction("dropped_malformed", problem.line, f"{problem.kind}: {problem.detail}"))
    rows: list[tuple[PiEntry, int, str | None]] = []
    seen: set[str] = set()
    for entry, line, raw in _rows(session):
        if entry.id is not None and entry.id in seen:
            actions.append(PiRepairAction("dropped_duplicate", line, f"id {entry.id} was used by an earlier line"))
            continue
        if entry.id is not None:
            seen.add(entry.id)
        rows.append((entry, line, raw))
    for cycle in _cycles([entry for entry, _, _ in rows]):
        first = cycle[0]
        entry, line, raw = rows[first]
        rows[first] = (_reparent(entry, None), line, raw)
        actions.append(PiRepairAction("cycle_broken", line, f"parentId {entry.parent_id} closed a cycle; now a root"))
    return rows


def _first_pairing_error(session: PiSession) -> tuple[_PairingFinding, PiEntry] | None:
    entries_of = _message_entries(session)
    for finding in _pairing(build_session_context(session.entries).messages):
        if _SEVERITY[finding.kind] == "error" and id(finding.message) in entries_of:
            return finding, entries_of[id(finding.message)][0]
    return None


def _take_out(rows: list[tuple[PiEntry, int, str | None]], index: int) -> tuple[PiEntry, int, str | None]:
    """Remove ``rows[index]`` from the tree: its children hang on its parent."""
    removed, _, _ = rows[index]
    for position, (entry, line, raw) in enumerate(rows):
        if entry.parent_id is not None and entry.parent_id == removed.id:
            rows[position] = (_reparent(entry, removed.parent_id), line, raw)
    return rows.pop(index)


def _run_end(path: Sequence[PiEntry], call_id: str) -> PiEntry | None:
    """The last entry of the call's run on ``path``: its assistant, or the results right after it."""
    for index, entry in enumerate(path):
        message = entry.message if isinstance(entry, PiMessageEntry) else None
        if isinstance(message, PiAssistantMessage) and call_id in {call.id for call in message.tool_calls()}:
            end = index
            while end + 1 < len(path):
                following = path[end + 1]
                if not (isinstance(following, PiMessageEntry) and isinstance(following.message, PiToolResultMessage)):
                    break
                end += 1
            return path[end]
    return None


def _move_after(rows: list[tuple[PiEntry, int, str | None]], index: int, anchor: PiEntry) -> None:
    """Move ``rows[index]`` to right after ``anchor`` in the tree and in file order; what followed the anchor
    now follows the moved entry."""
    entry, line, raw = _take_out(rows, index)
    for position, (child, child_line, child_raw) in enumerate(rows):
        if child.parent_id is not None and child.parent_id == anchor.id:
            rows[position] = (_reparent(child, entry.id), child_line, child_raw)
    at = next(position for position, (other, _, _) in enumerate(rows) if other.id == anchor.id)
    rows.insert(at + 1, (_reparent(entry, anchor.id), line, raw))


def repair_pi_session(session: PiSession) -> PiRepairResult:
    """A repaired copy of ``session`` (see the module docstring for what is repaired and how)."""
    actions: list[PiRepairAction] = []
    rows = _fix_tree(session, actions)
    for _ in range(len(rows)):  # every step removes one pairing error
        current = _with(session, rows)
        found = _first_pairing_error(current)
        if found is None:
            break
        finding, entry = found
        index = next(position for position, (other, _, _) in enumerate(rows) if other is entry)
        line = rows[index][1]
        context_path = build_session_context(current.entries).path
        anchor = _run_end(context_path, finding.call_id or "") if finding.kind == "late_result" else None
        if anchor is not None and entry.id is not None:
            _move_after(rows, index, anchor)
            actions.append(
                PiRepairAction("moved_late_result", line, f"result for {finding.call_id} moved after {anchor.id}")
            )
        else:
            _take_out(rows, index)
            kind: PiRepairKind = (
                "dropped_duplicate_result" if finding.kind == "duplicate_result" else "dropped_orphan_result"
            )
            actions.append(PiRepairAction(kind, line, finding.detail))
    return PiRepairResult(_with(session, rows), actions)
