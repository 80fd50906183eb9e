"""Accounting for a transcript's lines (issue 16): why a file yields no conversation, and why read lines did
not become part of the resumed history (R7.14 malformed, R7.16 progress, R7.18 chain, R7.20 clean-up)."""

from __future__ import annotations

from pathlib import Path

import pytest

from agentbus_redis.clock import utc_now
from agentbus_redis.ids import random_uuid
from agentbus_redis.transcript import diagnose_no_conversation, read_transcript, resume_session, skipped_lines


@pytest.mark.parametrize(
    ("data", "kind", "line_number"),
    [
        (b"", "empty", None),
        (b"\n\n", "empty", None),
        (b"\xff\xfe\x00binary\n", "binary", 1),
        (b"\n# a heading\n", "not_jsonl", 2),
        (b'"a string"\n', "not_jsonl", 1),
        (b'{"type":"summary","summary":"s","leafUuid":"x"}\n', "no_conversation", None),
    ],
)
def test_diagnose_no_conversation(data: bytes, kind: str, line_number: int | None) -> None:
    problem = diagnose_no_conversation(read_transcript(data))
    assert problem.kind == kind
    assert problem.line_number == line_number
    assert (f"line {line_number}: " in str(problem)) is (line_number is not None)


def test_every_line_is_published_or_skipped_for_a_reason(corpus_root: Path) -> None:
    data = (corpus_root / "claude-code/marot__spotter/258c7280-ae70-4798-800f-63464d01a85d.jsonl").read_bytes()
    parse = read_transcript(data)
    resumed = resume_session(data, clock=utc_now, ids=random_uuid)
    kept = {message.uuid for message in resumed.messages}
    skipped = skipped_lines(parse, chain_uuids=resumed.chain_uuids, kept_uuids=kept)
    from_file = sum(1 for numbered in parse.lines if getattr(numbered.line, "uuid", None) in kept)
    assert from_file + sum(skipped.values()) == len(parse.lines) + len(parse.errors)
    assert skipped["progress (not part of a resumed history, R7.16)"] > 0
    assert skipped["off the resumed chain (R7.18)"] > 0
