"""verify_transcript / repair_transcript: structural issues with line numbers, and non-destructive repair."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from agentbus_redis.messages.constants import SYNTHETIC_TOOL_RESULT_PLACEHOLDER
from agentbus_redis.transcript import (
    TranscriptParse,
    build_transcript,
    main_chain,
    read_transcript,
    repair_transcript,
    verify_transcript,
)
from tests.shared.transcript_builders import (
    CLAUDE_CODE_CORPUS,
    CORPUS_FILES,
    assistant,
    jsonl,
    progress,
    system,
    text,
    tool_result,
    tool_use,
    user,
)


def kinds(parse: TranscriptParse) -> list[tuple[str, str, tuple[int, ...]]]:
    return [(issue.kind, issue.severity, issue.line_numbers) for issue in verify_transcript(parse).issues]


def test_clean_chain_has_no_issues() -> None:
    data = jsonl(
        user("u1", None, "go", second=1),
        assistant("a1", "u1", [tool_use("t1")], second=2),
        progress("p1", "a1", second=3),
        user("r1", "p1", [tool_result("t1")], second=4),
        system("b", None, "compact_boundary", second=5),
        user("s", "b", "summary", second=6),
    )
    report = verify_transcript(read_transcript(data))
    assert report.issues == ()
    assert report.ok


def test_duplicate_uuid_is_an_error_unless_identical() -> None:
    line = user("u1", None, "same", second=1)
    data = jsonl(line, line, user("u1", None, "different", second=2))
    assert kinds(read_transcript(data)) == [
        ("duplicate_uuid", "warning", (1, 2)),
        ("duplicate_uuid", "error", (1, 3)),
    ]


def test_chain_break_is_an_error_in_the_main_chain_and_a_warning_in_a_sidechain() -> None:
    data = jsonl(
        user("u1", None, second=1),
        user("u2", "gone", second=2),
        user("side", "parent-session-msg", second=3, isSidechain=True, agentId="ag"),
    )
    assert kinds(read_transcript(data)) == [("chain_break", "error", (2,)), ("chain_break", "warning", (3,))]


def test_cycles_are_reported_once_with_their_lines() -> None:
    data = jsonl(user("root", None), user("a", "c", second=1), user("b", "a", second=2), user("c", "b", second=3))
    assert kinds(read_transcript(data)) == [("cycle", "error", (2, 3, 4))]


def test_tool_pairing_issues_are_warnings() -> None:
    data = jsonl(
        user("u1", None, second=1),
        assistant("a1", "u1", [tool_use("t1"), tool_use("t2")], second=2),
        user("r1", "a1", [tool_result("t2", SYNTHETIC_TOOL_RESULT_PLACEHOLDER), tool_result("t9")], second=3),
    )
    issues = verify_transcript(read_transcript(data)).issues
    found = {(issue.kind, issue.tool_use_id, issue.line_numbers) for issue in issues}
    assert found == {
        ("placeholder_result", "t2", (3,)),
        ("unpaired_tool_use", "t1", (2,)),
        ("orphan_tool_result", "t9", (3,)),
    }
    assert all(issue.severity == "warning" for issue in issues)


def test_multiple_main_roots_warn_but_boundaries_and_sidechains_do_not_count() -> None:
    data = jsonl(
        progress("p0", None),
        user("u1", "p0", second=1),
        system("b", None, "compact_boundary", second=2),
        user("side", None, second=3, isSidechain=True),
    )
    assert kinds(read_transcript(data)) == []
    data += jsonl(user("u2", None, second=4))
    assert kinds(read_transcript(data)) == [("multiple_roots", "warning", (2, 5))]


def test_edge_cases_corpus_names_each_malformed_line(corpus_root: Path) -> None:
    """daaain edge_cases.jsonl: `"massive error"` (13), `{"silly": "this"}` (14), `42` (15), `[1]` (16)
    are malformed; the user lines with the `contenst` typo (10), `"message":"error"` with `timesstamp`
    (11) and content `["wow error"]` (18) have a uuid, so they are other-shaped lines kept in the chain
    (issue 15, R7.14); line 17 is an assistant from another session whose parent `assistant_003` is absent."""
    data = (corpus_root / CLAUDE_CODE_CORPUS / "daaain__claude-code-log/edge_cases.jsonl").read_bytes()
    report = verify_transcript(read_transcript(data))
    malformed = report.of_kind("malformed_line")
    assert [issue.line_numbers[0] for issue in malformed] == [13, 14, 15, 16]
    assert "not_an_object" in malformed[0].detail
    assert "missing_type" in malformed[1].detail
    other = report.of_kind("other_shape")
    assert [(issue.line_numbers, issue.severity) for issue in other] == [
        ((10,), "warning"),
        ((11,), "warning"),
        ((18,), "warning"),
    ]
    assert "timestamp, message" in other[1].detail
    assert [issue.line_numbers for issue in report.of_kind("chain_break")] == [(17,)]
    assert {issue.tool_use_id for issue in report.of_kind("unpaired_tool_use")} == {
        "tool_edge_002",
        "toolu_todowrite_002",
    }
    assert not report.ok


def test_repair_drops_malformed_and_duplicates_and_relinks_breaks() -> None:
    data = (
        jsonl(user("u1", None, "one", second=1), assistant("a1", "u1", [text("x")], second=2))
        + "garbage\n"
        + jsonl(
            user("u1", None, "dup", second=3),
            user("side", None, "sub", second=4, isSidechain=True, agentId="ag"),
            user("u2", "lost", "two", second=5),
        )
    )
    parse = read_transcript(data)
    repaired = repair_transcript(parse)
    assert [(action.kind, action.line_number) for action in repaired.actions] == [
        ("dropped_malformed", 3),
        ("dropped_duplicate", 4),
        ("reparented", 6),
    ]
    original = data.split("\n")
    assert repaired.lines[:3] == [original[0], original[1], original[4]]  # untouched lines byte for byte
    relinked = json.loads(repaired.lines[3])
    assert relinked["parentUuid"] == "a1"  # the previous main-chain participant, not the sidechain line
    assert next(iter(relinked)) == "type"  # key order of the original line is kept
    assert repaired.report == verify_transcript(parse)
    again = read_transcript(repaired.text)
    assert verify_transcript(again).ok
    chain = main_chain(build_transcript(again))
    assert [message.uuid for message in chain] == ["u1", "a1", "u2"]


def test_repair_breaks_cycles_at_their_earliest_line() -> None:
    data = jsonl(user("root", None), user("a", "c", second=1), user("b", "a", second=2), user("c", "b", second=3))
    repaired = repair_transcript(read_transcript(data))
    assert [(action.kind, action.line_number, action.uuid) for action in repaired.actions] == [("cycle_broken", 2, "a")]
    assert json.loads(repaired.lines[1])["parentUuid"] == "root"
    assert verify_transcript(read_transcript(repaired.text)).ok


def test_repair_never_edits_its_input() -> None:
    data = jsonl(user("u1", None), user("u2", "gone", second=1))
    parse = read_transcript(data)
    before = [numbered.line.to_wire() for numbered in parse.lines]
    repair_transcript(parse)
    assert [numbered.line.to_wire() for numbered in parse.lines] == before


@pytest.mark.parametrize("relative", CORPUS_FILES)
def test_every_corpus_file_verifies_and_repairs_to_no_errors(corpus_root: Path, relative: str) -> None:
    parse = read_transcript((corpus_root / CLAUDE_CODE_CORPUS / relative).read_bytes())
    report = verify_transcript(parse)
    if relative not in {"daaain__claude-code-log/edge_cases.jsonl", "jazzyalex__agent-sessions/small.jsonl"}:
        assert report.ok, report.errors
    repaired = repair_transcript(parse)
    if repaired.actions:
        assert verify_transcript(read_transcript(repaired.text)).ok
    else:
        assert repaired.lines == [numbered.raw.strip() for numbered in parse.lines]
