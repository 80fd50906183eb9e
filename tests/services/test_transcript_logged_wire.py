"""A transcript line built from the message's wire object as logged (``logged_wire.py``) is the line built from
the validated message's dump: over the real corpus, message by message (same keys, order, values and types)
and line by line through ``build_chain_lines``; and where ``orjson`` would read an entry otherwise than the
validation, the model is dumped."""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest
from pydantic import ValidationError

from agentbus_redis.bus.events import LogEntry, parse_log_entry
from agentbus_redis.json_types import JsonObject
from agentbus_redis.messages.factories import create_assistant_message, create_user_message
from agentbus_redis.messages.kinds import Message, parse_message
from agentbus_redis.runtime.codec import DATA_FIELD, entry_fields
from agentbus_redis.transcript_files.cleaning import CleaningPolicy, clean_messages_for_logging
from agentbus_redis.transcript_files.logged_wire import LoggedWires, logged_message_wire, wire_of
from agentbus_redis.transcript_files.recording import TeamInfo, build_chain_lines
from tests.conftest import CORPUS_ROOT, corpus_cases

CORPUS_FILES = corpus_cases("claude-code")
STAMP = {"userType": "external", "entrypoint": "sdk-ts", "cwd": "/w", "sessionId": "s", "version": "1", "slug": None}


def logged(messages: list[Message]) -> list[bytes]:
    """The log entries ingestion writes for ``messages`` (``entry_fields`` of a ``LogEntry``)."""
    return [
        entry_fields(LogEntry(session_id="s", seq=seq, message=message))[DATA_FIELD]
        for seq, message in enumerate(messages, 1)
    ]


def corpus_messages(source: Path) -> list[Message]:
    """Every line of ``source`` that validates as a message."""
    messages: list[Message] = []
    for raw in source.read_bytes().splitlines():
        try:
            value = orjson.loads(raw)
            messages.append(parse_message(value))
        except (orjson.JSONDecodeError, ValidationError, TypeError, AttributeError):
            continue
    return messages


def _name(path: Path) -> str:
    return str(path.relative_to(CORPUS_ROOT / "claude-code"))


@pytest.mark.parametrize("source", CORPUS_FILES, ids=_name)
def test_logged_wire_is_the_dump_of_the_validated_message(source: Path) -> None:
    raws = logged(corpus_messages(source))
    records = [parse_log_entry(raw) for raw in raws]
    wires: dict[int, tuple[Message, JsonObject]] = {}
    for raw, record in zip(raws, records, strict=True):
        wire = logged_message_wire(raw)
        if wire is None:
            continue
        # orjson.dumps keeps key order and tells 1 from 1.0: equal bytes, equal objects key for key.
        assert orjson.dumps(wire) == orjson.dumps(record.message.to_wire()), raw[:200]
        wires[id(record.message)] = (record.message, wire)
    messages = clean_messages_for_logging([record.message for record in records], CleaningPolicy())
    team = TeamInfo()
    spliced = build_chain_lines(messages, "p", stamp=dict(STAMP), team=team, agent_id=None, wires=wires)
    dumped = build_chain_lines(messages, "p", stamp=dict(STAMP), team=team, agent_id=None)
    assert spliced == dumped


def test_logged_wire_of_an_entry() -> None:
    message = create_user_message("héllo \U0001f600")
    (raw,) = logged([message])
    wire = logged_message_wire(raw)
    assert wire == message.to_wire()
    assert logged_message_wire(raw.decode()) == wire


@pytest.mark.parametrize(
    "data",
    [
        b'{"v":1,"session_id":"s","seq":1,"message":{"type":"user","n":12345678901234567890123}}',  # beyond 64 bits
        b'{"v":1,"session_id":"s","seq":1,"message":{"type":"user","text":"\\ud800"}}',  # lone surrogate
        b'{"v":1,"session_id":"s","seq":1,"message":{"type":"user","n":1e400}}',  # beyond a double
        b'{"v":1,"session_id":"s","seq":1,"message":"text"}',
        b"[1, 2]",
        b"not json",
    ],
)
def test_no_logged_wire_where_orjson_reads_otherwise(data: bytes) -> None:
    assert logged_message_wire(data) is None


def test_wire_of_takes_the_logged_object_only_for_that_very_message() -> None:
    message = create_assistant_message("reply")
    other = message.model_copy()
    marker: JsonObject = {"type": "assistant", "marker": True}
    wires: LoggedWires = {id(message): (message, marker)}
    assert wire_of(message, wires) is marker
    assert wire_of(other, wires) == other.to_wire()  # another object (a cleaned copy): dumped
    assert wire_of(message, {id(message): (other, marker)}) == message.to_wire()  # an id held by another message
    assert wire_of(message, None) == message.to_wire()


def test_a_message_the_cleaning_changes_is_written_as_cleaned() -> None:
    """R7.5: ``isVirtual`` is dropped from the line; the wire object as logged still has it."""
    virtual = create_user_message("virtual").model_copy(update={"is_virtual": True})
    (raw,) = logged([virtual])
    record = parse_log_entry(raw)
    wire = logged_message_wire(raw)
    assert wire is not None
    assert wire["isVirtual"] is True
    wires: LoggedWires = {id(record.message): (record.message, wire)}
    cleaned = clean_messages_for_logging([record.message], CleaningPolicy())
    chain = build_chain_lines(cleaned, None, stamp=dict(STAMP), team=TeamInfo(), agent_id=None, wires=wires)
    assert "isVirtual" not in orjson.loads(chain.lines[0])
