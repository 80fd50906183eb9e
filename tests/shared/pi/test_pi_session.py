"""Session files (P7), migration (P7.9–P7.11), the context from the tree (P8) and pi's Anthropic
conversion (P6), on hand-made sessions and the spec's worked examples."""

from __future__ import annotations

import json

import pytest

from agentbus_redis.ids import SequentialIds
from agentbus_redis.pi.anthropic import convert_messages, sanitize_surrogates
from agentbus_redis.pi.context import LAST_ENTRY, build_session_context
from agentbus_redis.pi.entries import PiCompaction, PiMessageEntry, PiOtherEntry
from agentbus_redis.pi.messages import (
    PiAssistantMessage,
    PiBranchSummary,
    PiCompactionSummary,
    PiOtherMessage,
    PiUserMessage,
)
from agentbus_redis.pi.session import NotAPiSession, looks_like_pi_session, read_pi_session, write_pi_session
from agentbus_redis.pi.transform import PiTargetModel
from tests.shared.pi.builders import Obj, a, entry, header, llm, session_file, tc, text, tr, u

TARGET = PiTargetModel(api="anthropic-messages", provider="anthropic", id="claude-opus-4-5")


def read(*lines: Obj) -> object:
    return read_pi_session(session_file(*lines), ids=SequentialIds())


def labels(messages: list[object]) -> list[str]:
    out = []
    for message in messages:
        if isinstance(message, PiCompactionSummary):
            out.append("summary")
        elif isinstance(message, PiBranchSummary):
            out.append("branchSummary")
        elif isinstance(message, PiUserMessage | PiAssistantMessage):
            first = message.content[0] if message.content else None
            out.append(getattr(first, "text", "?"))
    return out


def test_p7_3_a_file_without_a_session_header_is_refused() -> None:
    with pytest.raises(NotAPiSession):
        read_pi_session(session_file({"type": "message", "message": u()}), ids=SequentialIds())
    assert not looks_like_pi_session(b"")
    assert not looks_like_pi_session(b"\x00\x01 binary")
    assert looks_like_pi_session(session_file(header()))


def test_p7_3_unparseable_lines_are_skipped_and_reported() -> None:
    data = session_file(header(), entry("e1", None, u("one"))) + b"{not json\n[1,2]\n\xff{}\n"
    session = read_pi_session(data, ids=SequentialIds())
    assert [(problem.line, problem.kind) for problem in session.problems] == [
        (3, "invalid_json"),
        (4, "not_an_object"),
        (5, "invalid_utf8"),
        (5, "invalid_json"),
    ]
    assert len(session.entries) == 1


def test_p1_6_unknown_fields_entry_types_and_roles_survive_a_round_trip() -> None:
    lines = [
        header() | {"future": {"x": 1}},
        entry("e1", None, u("hi") | {"responseId": "r1"}),
        entry("e2", "e1", {"role": "hookMessage", "customType": "x", "content": "c"}),
        entry("e3", "e2", kind="brand_new_entry", payload=[1, 2]),
        entry("e4", "e3", a(text("t") | {"textSignature": "s"}, {"type": "newBlock", "v": 1}, stop="stop")),
    ]
    session = read_pi_session(session_file(*lines), ids=SequentialIds())
    assert isinstance(session.entries[2], PiOtherEntry)
    assert isinstance(session.entries[1], PiMessageEntry)
    assert isinstance(session.entries[1].message, PiOtherMessage)
    back = [json.loads(line) for line in write_pi_session(session).splitlines()]
    assert back == lines
    assert write_pi_session(session) == session_file(*lines)  # byte for byte: the key order is pi's


def test_p7_10_v1_migration_links_entries_and_resolves_the_kept_index() -> None:
    v1 = [
        {"type": "session", "id": "old", "timestamp": "2025-01-01T00:00:00.000Z", "cwd": "/p", "provider": "anthropic"},
        {"type": "message", "timestamp": "2025-01-01T00:00:01.000Z", "message": u("first")},
        {"type": "message", "timestamp": "2025-01-01T00:00:02.000Z", "message": u("second")},
        {"type": "compaction", "timestamp": "2025-01-01T00:00:03.000Z", "summary": "S", "tokensBefore": 5,
         "firstKeptEntryIndex": 2},
        {"type": "message", "timestamp": "2025-01-01T00:00:04.000Z",
         "message": {"role": "hookMessage", "content": "h"}},
    ]  # fmt: skip
    session = read_pi_session(session_file(*v1), ids=SequentialIds())
    assert session.migrated_from == 1
    assert session.header.version == 3
    ids = [entry.id for entry in session.entries]
    assert all(len(entry_id or "") == 8 for entry_id in ids)
    assert [entry.parent_id for entry in session.entries] == [None, *ids[:-1]]
    compaction = session.entries[2]
    assert isinstance(compaction, PiCompaction)
    assert compaction.first_kept_entry_id == ids[1]  # index 2 counts the header as 0
    assert compaction.first_kept_entry_index is None
    written = [json.loads(line) for line in write_pi_session(session).splitlines()]
    assert list(written[0]) == ["type", "id", "timestamp", "cwd", "provider", "version"]  # JS appends new keys
    assert list(written[3]) == ["type", "timestamp", "summary", "tokensBefore", "id", "parentId", "firstKeptEntryId"]
    last = session.entries[3]
    assert isinstance(last, PiMessageEntry)
    assert last.message.role == "custom"  # P7.11
    context = build_session_context(session.entries)
    assert labels(context.messages) == ["summary", "second"]


def test_p8_6_compaction_keeps_from_first_kept_entry() -> None:
    entries = [
        entry("1", None, u("1")),
        entry("2", "1", a(text("2"), stop="stop")),
        entry("3", "2", u("3")),
        entry("4", "3", a(text("4"), stop="stop")),
        entry("5", "4", kind="compaction", summary="S", firstKeptEntryId="3", tokensBefore=9),
        entry("6", "5", u("6")),
        entry("7", "6", a(text("7"), stop="stop")),
    ]
    session = read_pi_session(session_file(header(), *entries), ids=SequentialIds())
    assert labels(build_session_context(session.entries).messages) == ["summary", "3", "4", "6", "7"]


def test_p8_12_complex_tree_worked_example() -> None:
    entries = [
        entry("1", None, u("1")),
        entry("2", "1", a(text("2"), stop="stop")),
        entry("3", "2", u("3")),
        entry("4", "3", a(text("4"), stop="stop")),
        entry("5", "4", kind="compaction", summary="S", firstKeptEntryId="3", tokensBefore=9),
        entry("6", "5", u("6")),
        entry("7", "6", a(text("7"), stop="stop")),
        entry("8", "3", u("8")),
        entry("9", "8", a(text("9"), stop="stop")),
        entry("10", "3", kind="branch_summary", fromId="9", summary="B"),
        entry("11", "10", u("11")),
    ]
    session = read_pi_session(session_file(header(), *entries), ids=SequentialIds())
    assert labels(build_session_context(session.entries, "7").messages) == ["summary", "3", "4", "6", "7"]
    assert labels(build_session_context(session.entries, "11").messages) == ["1", "2", "3", "branchSummary", "11"]
    assert labels(build_session_context(session.entries, LAST_ENTRY).messages) == labels(
        build_session_context(session.entries, "11").messages
    )
    assert build_session_context(session.entries, None).messages == []  # resetLeaf
    assert labels(build_session_context(session.entries, "nope").messages)[-1] == "11"  # unknown → last


def test_p8_3_settings_along_the_path_and_p8_2_dangling_root_and_cycle() -> None:
    entries = [
        entry("m", "missing", kind="model_change", provider="openai", modelId="gpt-5"),
        entry("t", "m", kind="thinking_level_change", thinkingLevel="high"),
        entry("u", "t", u("x")),
        entry("a", "u", a(text("y"), stop="stop")),
    ]
    session = read_pi_session(session_file(header(), *entries), ids=SequentialIds())
    context = build_session_context(session.entries)
    assert context.thinking_level == "high"
    assert context.model is not None
    assert (context.model.provider, context.model.model_id) == ("anthropic", "claude-opus-4-5")  # the assistant wins
    looped = [entry("x", "y", u("x")), entry("y", "x", u("y"))]
    session = read_pi_session(session_file(header(), *looped), ids=SequentialIds())
    assert labels(build_session_context(session.entries).messages) == ["x", "y"]


def test_p6_6_worked_example() -> None:
    messages = llm(
        {"role": "user", "content": "   ", "timestamp": 1},
        {"role": "user", "content": [text("look"), {"type": "image", "data": "P", "mimeType": "image/png"}, text(" ")]},
        a(
            {"type": "thinking", "thinking": "hmm", "thinkingSignature": "SIG"},
            text(""),
            tc("toolu_1", "read", path="a"),
            tc("toolu_2", "bash", command="ls"),
        ),
        tr("toolu_1") | {"content": [text("l1"), text("l2")]},
        tr("toolu_2") | {"content": [{"type": "image", "data": "Q", "mimeType": "image/png"}]},
        a({"type": "thinking", "thinking": "unsigned", "thinkingSignature": ""}, text("done"), stop="stop"),
        {"role": "user", "content": "next"},
    )
    out = convert_messages(messages, TARGET, images_supported=False, oauth=True, cache_retention="short")
    image = {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "Q"}}
    assert out == [
        {"role": "user", "content": [{"type": "text", "text": "look"}]},
        {
            "role": "assistant",
            "content": [
                {"type": "thinking", "thinking": "hmm", "signature": "SIG"},
                {"type": "tool_use", "id": "toolu_1", "name": "Read", "input": {"path": "a"}},
                {"type": "tool_use", "id": "toolu_2", "name": "Bash", "input": {"command": "ls"}},
            ],
        },
        {
            "role": "user",
            "content": [
                {"type": "tool_result", "tool_use_id": "toolu_1", "content": "l1\nl2", "is_error": False},
                {
                    "type": "tool_result",
                    "tool_use_id": "toolu_2",
                    "content": [{"type": "text", "text": "(see attached image)"}, image],
                    "is_error": False,
                },
            ],
        },
        {"role": "assistant", "content": [{"type": "text", "text": "unsigned"}, {"type": "text", "text": "done"}]},
        {"role": "user", "content": [{"type": "text", "text": "next", "cache_control": {"type": "ephemeral"}}]},
    ]


def test_p2_6_unpaired_surrogates_are_removed_paired_kept() -> None:
    assert sanitize_surrogates("a\ud83db\ude00c\ud83d\ude00") == "abc\ud83d\ude00"
