"""Issue 15: text UTF-8 cannot carry (invalid bytes, lone surrogates) is replaced or re-escaped, counted,
and never crashes a writer."""

from __future__ import annotations

import json

from agentbus_redis.transcript import (
    decode_utf8_replacing,
    dump_line,
    escape_lone_surrogates,
    parse_line,
    read_transcript,
    repair_transcript,
    replace_lone_surrogates,
    well_formed_json,
)
from agentbus_redis.transcript.unicode_text import json_line_lone_surrogates
from tests.shared.transcript_builders import jsonl, user


def test_decode_utf8_replacing_counts_each_invalid_sequence_like_errors_replace() -> None:
    data = b"ok \xe9 then \xff\xfe and \xf0\x9f\x98 cut; real \xef\xbf\xbd stays"
    text, replaced = decode_utf8_replacing(data)
    assert text == data.decode("utf-8", errors="replace")
    assert replaced == 4  # \xe9, \xff, \xfe, the truncated 3-byte sequence; the real U+FFFD is not counted
    assert decode_utf8_replacing("café".encode()) == ("café", 0)


def test_lone_surrogates_are_replaced_for_output_and_pairs_are_untouched() -> None:
    decoded = json.loads('"a \\ud83d b \\ude00 c \\ud83d\\ude00"')
    assert replace_lone_surrogates(decoded) == ("a \ufffd b \ufffd c \U0001f600", 2)
    text, replaced = well_formed_json({"content": decoded})
    assert replaced == 2
    text.encode("utf-8")  # encodable
    assert json.loads(text) == {"content": "a \ufffd b \ufffd c \U0001f600"}


def test_escaping_lone_surrogates_keeps_the_json_value() -> None:
    value = {"content": json.loads('"cut \\ud83d"')}
    escaped = escape_lone_surrogates(json.dumps(value, ensure_ascii=False))
    escaped.encode("utf-8")
    assert escaped == '{"content": "cut \\ud83d"}'
    assert json.loads(escaped) == value


def test_lone_surrogate_detection_ignores_escaped_backslashes_and_pairs() -> None:
    assert json_line_lone_surrogates('{"a":"\\\\ud83d"}') == 0  # a backslash, then the text "ud83d"
    assert json_line_lone_surrogates('{"a":"\\ud83d\\ude00"}') == 0
    assert json_line_lone_surrogates('{"a":"\\ud83d","b":"\\uDE00"}') == 2


def test_repair_reparenting_a_line_with_a_lone_surrogate_writes_encodable_text() -> None:
    """The re-parented line is re-serialized: its lone surrogate goes back out as the escape it was."""
    bad = user("u2", "missing", "x")
    data = jsonl(user("u1", None, "one"), bad).replace('"x"', '"cut \\ud83d"')
    result = repair_transcript(read_transcript(data))
    assert [action.kind for action in result.actions] == ["reparented"]
    result.text.encode("utf-8")
    assert "\\ud83d" in result.lines[1]
    assert json.loads(result.lines[1])["parentUuid"] == "u1"


def test_dump_line_writes_lone_surrogates_back_as_escapes() -> None:
    raw = jsonl(user("u1", None, "x")).strip().replace('"x"', '"cut \\ud83d"')
    line = parse_line(raw, 1)
    dumped = dump_line(line)
    dumped.encode("utf-8")
    assert "\\ud83d" in dumped
    assert json.loads(dumped) == json.loads(raw)
