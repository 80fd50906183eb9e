"""The line model (R7.3, R7.4) and lossless per-line round trips over the whole corpus."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from agentbus_redis.errors import TranscriptLineError
from agentbus_redis.messages.kinds import AssistantMessage, ProgressMessage, UserMessage
from agentbus_redis.messages.system import CompactBoundarySystemMessage
from agentbus_redis.transcript import (
    METADATA_TYPES,
    FileHistorySnapshotLine,
    OtherEntryLine,
    QueueOperationLine,
    SummaryLine,
    UnknownLine,
    build_transcript,
    dump_line,
    model_refusal,
    parse_line,
    read_transcript,
    repair_transcript,
    verify_transcript,
)
from tests.shared.transcript_builders import CLAUDE_CODE_CORPUS, CORPUS_FILES, corpus_files


def test_corpus_file_list_is_complete(corpus_root: Path) -> None:
    found = [str(path.relative_to(corpus_root / CLAUDE_CODE_CORPUS)) for path in corpus_files(corpus_root)]
    assert sorted(found) == sorted(CORPUS_FILES)


@pytest.mark.parametrize("relative", CORPUS_FILES)
def test_r7_14_every_corpus_line_that_parses_dumps_back_equal(corpus_root: Path, relative: str) -> None:
    """Lossless reading: dump_line(parse_line(x)) is the same JSON value as x, for every good line."""
    data = (corpus_root / CLAUDE_CODE_CORPUS / relative).read_text(encoding="utf-8")
    physical = data.split("\n")
    parse = read_transcript(data)
    assert parse.lines, relative
    for numbered in parse.lines:
        original = json.loads(physical[numbered.line_number - 1])
        assert json.loads(dump_line(numbered.line)) == original, (relative, numbered.line_number)
    assert len(parse.lines) + len(parse.errors) == sum(1 for line in physical if line.strip())


def test_r7_4_metadata_kinds_parse_to_their_models() -> None:
    summary = parse_line('{"type":"summary","summary":"Did X","leafUuid":"u9"}', 1)
    assert isinstance(summary, SummaryLine)
    assert (summary.leaf_uuid, summary.summary) == ("u9", "Did X")
    queue = parse_line('{"type":"queue-operation","operation":"enqueue","timestamp":"t","sessionId":"s"}', 2)
    assert isinstance(queue, QueueOperationLine)
    assert queue.operation == "enqueue"
    snapshot = parse_line('{"type":"file-history-snapshot","messageId":"m","snapshot":{},"isSnapshotUpdate":false}', 3)
    assert isinstance(snapshot, FileHistorySnapshotLine)
    assert snapshot.is_snapshot_update is False
    assert len(METADATA_TYPES) == 19


def test_unknown_line_type_is_kept_verbatim() -> None:
    raw = '{"isSidechain":false,"type":"bridge-session","bridgeSessionId":"b1","nested":{"a":[1,2.5,null]}}'
    line = parse_line(raw, 7)
    assert isinstance(line, UnknownLine)
    assert line.type == "bridge-session"
    assert json.loads(dump_line(line)) == json.loads(raw)
    assert dump_line(line).startswith('{"type":"bridge-session"')


def test_r7_4_metadata_lines_dump_with_type_first() -> None:
    line = parse_line('{"sessionId":"s1","customTitle":"My title","type":"custom-title"}', 1)
    assert dump_line(line) == '{"type":"custom-title","sessionId":"s1","customTitle":"My title"}'


def test_r7_3_message_line_dumps_in_claude_code_key_order() -> None:
    raw = json.dumps(
        {
            "gitBranch": "main",
            "type": "user",
            "sessionId": "s1",
            "uuid": "b2",
            "message": {"role": "user", "content": "fix the bug"},
            "cwd": "/home/alice/proj",
            "timestamp": "2026-04-01T10:00:00.000Z",
            "promptId": "p1",
            "userType": "external",
            "version": "2.1.88",
            "isSidechain": False,
            "entrypoint": "cli",
            "parentUuid": "a1",
        }
    )
    line = parse_line(raw, 1)
    assert dump_line(line) == (
        '{"parentUuid":"a1","isSidechain":false,"promptId":"p1","type":"user",'
        '"message":{"role":"user","content":"fix the bug"},"uuid":"b2","timestamp":"2026-04-01T10:00:00.000Z",'
        '"userType":"external","entrypoint":"cli","cwd":"/home/alice/proj","sessionId":"s1","version":"2.1.88",'
        '"gitBranch":"main"}'
    )


def test_r7_3_compact_boundary_keeps_its_own_logical_parent_and_null_parent() -> None:
    raw = (
        '{"parentUuid":null,"logicalParentUuid":"x","isSidechain":false,"type":"system","subtype":"compact_boundary",'
        '"content":"Conversation compacted","uuid":"b","timestamp":"t","compactMetadata":{"trigger":"auto"}}'
    )
    line = parse_line(raw, 1)
    assert isinstance(line, CompactBoundarySystemMessage)
    dumped = json.loads(dump_line(line))
    assert dumped == json.loads(raw)
    assert list(dumped)[:5] == ["parentUuid", "logicalParentUuid", "isSidechain", "type", "subtype"]


def test_message_kinds_route_to_message_models() -> None:
    assert isinstance(
        parse_line('{"type":"user","message":{"content":"x"},"uuid":"u","timestamp":"t"}', 1), UserMessage
    )
    raw = '{"type":"assistant","message":{"content":[],"model":"m"},"uuid":"a","timestamp":"t"}'
    assert isinstance(parse_line(raw, 1), AssistantMessage)
    progress = '{"type":"progress","data":{"type":"hook_progress"},"uuid":"p","timestamp":"t","parentUuid":"a"}'
    assert isinstance(parse_line(progress, 1), ProgressMessage)


@pytest.mark.parametrize(
    ("raw", "kind"),
    [
        ('{"type":"user",', "bad_json"),
        ('{"a":NaN,"type":"user"}', "bad_json"),
        ('"massive error"', "not_an_object"),
        ("42", "not_an_object"),
        ("[1]", "not_an_object"),
        ('{"silly":"this"}', "missing_type"),
        ('{"type":5}', "missing_type"),
        ('{"type":"user","timestamp":"t","message":"error"}', "invalid_message"),
        ('{"type":"user","uuid":5,"message":"error"}', "invalid_message"),
        ('{"type":"user","uuid":"u","parentUuid":7,"message":"error"}', "invalid_message"),
    ],
)
def test_r7_14_malformed_lines_raise_typed_errors(raw: str, kind: str) -> None:
    with pytest.raises(TranscriptLineError) as caught:
        parse_line(raw, 13)
    assert caught.value.kind == kind
    assert caught.value.line_number == 13
    assert caught.value.raw == raw
    assert "line 13" in str(caught.value)


def test_invalid_message_error_names_the_failing_fields() -> None:
    raw = '{"type":"user","message":{"role":"user","contenst":[]}}'
    with pytest.raises(TranscriptLineError) as caught:
        parse_line(raw, 2)
    assert set(caught.value.locations) == {"uuid", "timestamp", "message.content"}


def test_snake_case_keys_stay_extras_and_round_trip() -> None:
    """Validation is by alias only: a stray ``session_id`` does not become ``sessionId``."""
    raw = '{"type":"system","subtype":"api_refusal","sessionId":"a","session_id":"b","uuid":"u","timestamp":"t"}'
    line = parse_line(raw, 1)
    assert line.session_id == "a"  # type: ignore[union-attr]
    assert json.loads(dump_line(line)) == json.loads(raw)


def test_issue15_a_metadata_line_its_model_refuses_is_kept_verbatim_and_not_loaded() -> None:
    """Repair drops malformed lines: a newer build's metadata shape must not be one of them."""
    raw = '{"type":"custom-title","sessionId":"s","customTitle":{"not":"a string"}}'
    line = parse_line(raw, 13)
    assert isinstance(line, OtherEntryLine)
    assert json.loads(dump_line(line)) == json.loads(raw)
    assert model_refusal(line) == ["customTitle"]
    parse = read_transcript(raw + "\n")
    assert build_transcript(parse).custom_titles == {}
    (issue,) = verify_transcript(parse).of_kind("other_shape")
    assert issue.severity == "warning"
    assert issue.detail == "custom-title line its model refuses at customTitle: kept, not loaded"
    assert repair_transcript(parse).lines == [raw]
