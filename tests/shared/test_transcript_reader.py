"""R7.14 reading: BOM, blank lines, line numbers, malformed and torn lines kept as errors."""

from __future__ import annotations

from pathlib import Path

from agentbus_redis.messages.kinds import UserMessage
from agentbus_redis.transcript import OtherMessageLine, SummaryLine, model_refusal, read_transcript, verify_transcript
from tests.shared.transcript_builders import CLAUDE_CODE_CORPUS, jsonl, user

GOOD = jsonl(user("u1", None, "one"), user("u2", "u1", "two"))


def test_r7_14_bom_is_stripped_and_blank_lines_keep_numbering() -> None:
    data = "\ufeff" + GOOD.replace("\n", "\n\n   \n", 1)
    parse = read_transcript(data)
    assert [numbered.line_number for numbered in parse.lines] == [1, 4]
    assert not parse.errors
    assert parse.torn_tail is False
    assert parse.line_count == 4


def test_bytes_text_and_line_iterables_read_the_same() -> None:
    from_text = read_transcript(GOOD)
    from_bytes = read_transcript(b"\xef\xbb\xbf" + GOOD.encode())
    from_lines = read_transcript(GOOD.splitlines(keepends=True))
    from_chunks = read_transcript([GOOD[:7], GOOD[7:90], GOOD[90:]])
    for other in (from_bytes, from_lines, from_chunks):
        assert other.lines == from_text.lines
        assert other.errors == from_text.errors


def test_crlf_line_endings_are_trimmed() -> None:
    parse = read_transcript(GOOD.replace("\n", "\r\n"))
    assert len(parse.lines) == 2
    assert not parse.errors


def test_r7_14_torn_last_line_is_an_error_and_flagged() -> None:
    data = GOOD + '{"type":"user","message":{"role":"us'
    parse = read_transcript(data)
    assert len(parse.lines) == 2
    assert [(error.line_number, error.kind, error.torn) for error in parse.errors] == [(3, "bad_json", True)]
    assert parse.torn_tail is True


def test_unterminated_last_line_that_parses_is_not_torn() -> None:
    parse = read_transcript(GOOD.rstrip("\n"))
    assert len(parse.lines) == 2
    assert parse.torn_tail is False


def test_malformed_line_in_the_middle_is_not_torn() -> None:
    data = GOOD + "not json\n" + jsonl(user("u3", "u2"))
    parse = read_transcript(data)
    assert [(error.line_number, error.torn) for error in parse.errors] == [(3, False)]
    assert parse.torn_tail is False
    assert [numbered.line_number for numbered in parse.lines] == [1, 2, 4]


def test_issue15_an_invalid_utf8_byte_is_read_as_u_fffd_warned_and_keeps_the_chain() -> None:
    """Before: the line was a ``bad_utf8`` error, dropped, and the chain broke at it."""
    bad = jsonl(user("u3", "u2", "cafe")).encode().replace(b'"cafe"', b'"caf\xe9"')
    data = GOOD.encode() + bad + jsonl(user("u4", "u3")).encode()
    parse = read_transcript(data)
    assert parse.errors == ()
    assert [(w.line_number, w.kind, w.count) for w in parse.warnings] == [(3, "invalid_utf8", 1)]
    assert str(parse.warnings[0]) == "line 3: invalid_utf8: 1 invalid UTF-8 byte sequence(s) read as U+FFFD"
    third = parse.lines[2].line
    assert isinstance(third, UserMessage)
    assert third.message.content == "caf\ufffd"
    (issue,) = verify_transcript(parse).of_kind("invalid_utf8")
    assert issue.line_numbers == (3,)
    assert issue.severity == "warning"
    assert verify_transcript(parse).ok  # the chain u1 → u2 → u3 → u4 is whole


def test_issue15_a_torn_tail_with_invalid_bytes_is_still_a_torn_error() -> None:
    parse = read_transcript(GOOD.encode() + b'{"type":"user","uuid":"u3","message":{"content":"\xe9')
    assert [(error.line_number, error.kind, error.torn) for error in parse.errors] == [(3, "bad_json", True)]
    assert parse.torn_tail is True
    assert parse.warnings == ()


def test_issue15_lone_surrogate_escapes_are_kept_and_warned() -> None:
    line = jsonl(user("u3", "u2", "x")).replace('"x"', '"cut \\ud83d here, pair \\ud83d\\ude00 ok"')
    parse = read_transcript(GOOD + line)
    assert [(w.line_number, w.kind, w.count) for w in parse.warnings] == [(3, "lone_surrogate", 1)]
    third = parse.lines[2].line
    assert isinstance(third, UserMessage)
    assert third.message.content == "cut \ud83d here, pair \U0001f600 ok"  # lossless in the model


def test_raw_text_of_good_lines_is_kept() -> None:
    parse = read_transcript(GOOD)
    assert parse.lines[0].raw == GOOD.split("\n")[0]
    assert isinstance(parse.entries[0], UserMessage)


def test_r7_14_edge_cases_corpus_names_every_malformed_line(corpus_root: Path) -> None:
    """daaain edge_cases.jsonl: a JSON string (13), an object without `type` (14), a number (15), an
    array (16) are malformed. The user lines with the `"contenst"` typo (10), `"message":"error"` +
    `timesstamp` (11) and content `["wow error"]` (18) carry a uuid: other-shaped lines (issue 15)."""
    data = (corpus_root / CLAUDE_CODE_CORPUS / "daaain__claude-code-log/edge_cases.jsonl").read_bytes()
    parse = read_transcript(data)
    assert [(error.line_number, error.kind) for error in parse.errors] == [
        (13, "not_an_object"),
        (14, "missing_type"),
        (15, "not_an_object"),
        (16, "not_an_object"),
    ]
    others = {
        numbered.line_number: numbered.line for numbered in parse.lines if isinstance(numbered.line, OtherMessageLine)
    }
    assert sorted(others) == [10, 11, 18]
    assert model_refusal(others[11]) == ["timestamp", "message"]
    assert parse.torn_tail is False  # the file ends without a newline, but its last line parses
    assert isinstance(parse.lines[-1].line, SummaryLine)
    assert [numbered.line_number for numbered in parse.lines] == [1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 17, 18, 19]
