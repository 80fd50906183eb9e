"""Replies decoded into ``StreamEntry`` (``streams/entries.py``) and calls packed for the batch script
(``runtime/key_calls.py``): the fast paths give exactly what the general rules give."""

from __future__ import annotations

from collections.abc import Mapping
from enum import StrEnum
from typing import Any

import pytest

from agentbus_redis.runtime import key_calls
from agentbus_redis.runtime.fenced_reads import FencedRead
from agentbus_redis.runtime.key_calls import Arg, KeyCalls
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


class Color(StrEnum):
    RED = "red"


def test_members_are_sent_as_text_whatever_their_types() -> None:
    assert key_calls._as_text(["a", b"b"]) == ["a", b"b"]
    assert key_calls._as_text(["a", 1, 2.5, b"b", Color.RED]) == ["a", "1", "2.5", b"b", Color.RED]
    assert key_calls._as_text([]) == []


def test_xadds_queue_what_one_xadd_each_queues() -> None:
    first: dict[str, Arg] = {"data": b"x", "n": 3}
    outputs: list[tuple[str, Mapping[str, Arg] | Mapping[bytes, Arg], int | None]] = [
        ("s1", first, None),
        ("s2", {b"data": "y"}, 100),
    ]
    one_by_one, at_once = KeyCalls(), KeyCalls()
    for stream, fields, maxlen in outputs:
        one_by_one.add_xadd(stream, fields, maxlen)
    at_once.add_xadds(outputs)
    assert at_once.fenced_command(key="k", token="1") == one_by_one.fenced_command(key="k", token="1")
    assert one_by_one._calls == [
        ["XADD", 1, "*", "data", b"x", "n", "3"],
        ["XADD", 2, "MAXLEN", "~", "100", "*", b"data", "y"],
    ]


def test_each_key_is_declared_once_and_calls_name_it_by_number() -> None:
    calls = KeyCalls()
    calls.add_xadds([("log", {"data": b"1"}, None), ("events", {"data": b"1"}, 10)])
    calls.add("SET", "ledger", "v")
    calls.add_keyless("PUBLISH", "channel", "m")
    calls.add_xadd("log", {"data": b"2"})
    calls.add_members("SADD", "ledger:seen", ["a", "b"])
    calls.add("PEXPIRE", "log", 5)
    assert calls._keys == ["log", "events", "ledger", "ledger:seen"]
    assert [call[:2] for call in calls._calls] == [
        ["XADD", 1],
        ["XADD", 2],
        ["SET", 3],
        [0, "PUBLISH"],
        ["XADD", 1],
        ["SADD", 4],
        ["PEXPIRE", 1],
    ]
    assert calls.fenced_command(key="epoch", token="7")[2:8] == [5, "epoch", "log", "events", "ledger", "ledger:seen"]


def test_an_xadd_with_too_many_fields_is_refused() -> None:
    fields = {f"f{i}": b"v" for i in range(key_calls.MAX_ARGS_PER_CALL)}
    calls = KeyCalls()
    with pytest.raises(ValueError, match="arguments in one call"):
        calls.add_xadds([("s", fields, None)])
    assert len(calls) == 0


def test_xadd_heads_past_the_kept_ones_are_the_same(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(key_calls, "XADD_HEADS_KEPT", 0)
    monkeypatch.setattr(key_calls, "_XADD_HEADS", {})
    calls = KeyCalls()
    calls.add_xadds([("s", {"data": b"x"}, 12345), ("s", {"data": b"y"}, None)])
    assert calls._calls == [["XADD", 1, "MAXLEN", "~", "12345", "*", "data", b"x"], ["XADD", 1, "*", "data", b"y"]]
    assert key_calls._XADD_HEADS == {}
