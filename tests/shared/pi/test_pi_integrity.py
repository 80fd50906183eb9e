"""P7–P9: ``transcript verify|repair`` of a pi session (pi/integrity.py)."""

from __future__ import annotations

from agentbus_redis.ids import SequentialIds
from agentbus_redis.pi.integrity import repair_pi_session, verify_pi_session
from agentbus_redis.pi.session import PiSession, read_pi_session, write_pi_session
from tests.shared.pi.builders import a, entry, header, session_file, tc, text, tr, u


def read(data: bytes) -> PiSession:
    return read_pi_session(data, ids=SequentialIds(1))


def kinds(session: PiSession) -> list[tuple[str, str, tuple[int, ...]]]:
    return [(issue.kind, issue.severity, issue.line_numbers) for issue in verify_pi_session(session).issues]


def test_tree_problems_duplicate_ids_cycles_and_dangling_parents() -> None:
    data = session_file(
        header(),
        entry("e1", "nowhere", u("a")),
        entry("e2", "e1", a(text("b"), stop="stop")),
        entry("e2", "e1", a(text("again"), stop="stop")),
        entry("c1", "c2", u("loop")),
        entry("c2", "c1", u("loop")),
    )
    found = kinds(read(data))
    assert ("dangling_parent", "warning", (2,)) in found  # P8.2: pi treats it as a root
    assert ("duplicate_id", "error", (3, 4)) in found
    assert ("cycle", "error", (5, 6)) in found
    repaired = repair_pi_session(read(data))
    assert [action.kind for action in repaired.actions] == ["dropped_duplicate", "cycle_broken"]
    assert verify_pi_session(read(write_pi_session(repaired.session))).ok


def test_p9_context_pairing_unanswered_failed_duplicate_and_orphan() -> None:
    data = session_file(
        header(),
        entry("e1", None, u("go")),
        entry("e2", "e1", a(tc("toolu_1"), stop="aborted", errorMessage="Request was aborted.")),
        entry("e3", "e2", tr("toolu_1")),  # its call is in a failed turn: pi sends an orphan result
        entry("e4", "e3", a(tc("toolu_2"))),
        entry("e5", "e4", tr("toolu_2")),
        entry("e6", "e5", tr("toolu_2", "again")),
        entry("e7", "e6", a(tc("toolu_3"))),
        entry("e8", "e7", u("never mind")),
    )
    found = kinds(read(data))
    assert ("failed_turn", "warning", (3,)) in found
    assert ("orphan_result", "error", (4,)) in found
    assert ("duplicate_result", "error", (7,)) in found
    assert ("unanswered_call", "warning", (8,)) in found  # P5.6 inserts "No result provided"
    repaired = repair_pi_session(read(data))
    assert [action.kind for action in repaired.actions] == ["dropped_orphan_result", "dropped_duplicate_result"]
    after = verify_pi_session(read(write_pi_session(repaired.session)))
    assert after.ok
    assert {issue.kind for issue in after.issues} == {"failed_turn", "unanswered_call"}


def test_an_untouched_v3_session_repairs_to_the_same_bytes() -> None:
    data = session_file(header(), entry("e1", None, u("hi")), entry("e2", "e1", a(text("yo"), stop="stop")))
    repaired = repair_pi_session(read(data))
    assert repaired.actions == []
    assert write_pi_session(repaired.session) == data
