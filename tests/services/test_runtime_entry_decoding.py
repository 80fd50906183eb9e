"""Replies decoded into ``StreamEntry`` (``streams/entries.py``): the fast paths give exactly what the general
rules give."""

from __future__ import annotations

from typing import Any

import pytest

from agentbus_redis.runtime.fenced_reads import FencedRead
from agentbus_redis.streams import entries
from agentbus_redis.streams.entries import StreamEntry, decode_entries, decode_rows, decode_text

ROWS: list[list[Any]] = [
    [b"1-0", [b"data", b'{"a":1}', b"auth", b"\x00\xff"]],
    [b"2-0", []],
    [b"3-0", None],
    [b"4-0", [b"caf\xc3\xa9", b"x", b"\xff\xfe", b"y", b"data", b"first", b"data", b"last"]],
]


def test_rows_decode_as_redis_py_entries_do() -> None:
    read = FencedRead(ROWS, None)
    assert decode_rows("s", ROWS) == decode_entries("s", read.entries)
    live, deleted = decode_rows("s", ROWS)
    assert deleted == ["2-0", "3-0"]
    assert live == [
        StreamEntry("s", "1-0", {"data": b'{"a":1}', "auth": b"\x00\xff"}),
        StreamEntry("s", "4-0", {"café": b"x", decode_text(b"\xff\xfe"): b"y", "data": b"last"}),
    ]


def test_rows_with_a_name_without_value_are_refused() -> None:
    with pytest.raises(ValueError, match="not pairs"):
        decode_rows("s", [[b"1-0", [b"data", b"v", b"auth"]]])


def test_field_names_past_the_kept_ones_decode_the_same(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(entries, "FIELD_NAMES_KEPT", 0)
    monkeypatch.setattr(entries, "_FIELD_NAMES", entries._FieldNames())
    live, _ = decode_rows("s", [[b"1-0", [b"never-kept", b"v"]]])
    assert live[0].fields == {"never-kept": b"v"}
    assert len(entries._FIELD_NAMES) == 0
