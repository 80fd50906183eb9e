"""``agentbus transcript verify | repair | export``."""

from __future__ import annotations

import json
from pathlib import Path

from typer.testing import CliRunner

from agentbus_redis.cli.transcript import app
from agentbus_redis.messages.constants import SYNTHETIC_TOOL_RESULT_PLACEHOLDER
from agentbus_redis.messages.content import TextBlock, ToolResultBlock, ToolUseBlock
from agentbus_redis.messages.factories import create_user_message
from agentbus_redis.messages.kinds import AssistantMessage, AssistantPayload, Message
from agentbus_redis.transcript import read_transcript, verify_transcript
from agentbus_redis.transcript_files.lines import SessionStamp
from agentbus_redis.transcript_files.store import StoreConfig, TranscriptStore

runner = CliRunner()
EDGE_CASES = "claude-code/daaain__claude-code-log/edge_cases.jsonl"
TOOL_HEAVY = "claude-code/marot__spotter/tool_heavy.jsonl"


def _assistant(uuid: str, blocks: list[TextBlock | ToolUseBlock]) -> AssistantMessage:
    payload = AssistantPayload(
        id=f"msg_{uuid}", model="claude-sonnet-4-5", content=list(blocks), stop_reason="tool_use"
    )
    return AssistantMessage(message=payload, uuid=uuid, timestamp="2026-01-01T00:00:01.000Z")


async def _session(tmp_path: Path, messages: list[Message]) -> Path:
    store = TranscriptStore(tmp_path / "data", StoreConfig(stamp=SessionStamp(git_branch=None)))
    result = await store.record("s1", messages, cwd="/p")
    await store.close()
    return result.path


# ---------------------------------------------------------------- verify
def test_verify_names_each_malformed_line_of_edge_cases_and_fails(corpus_root: Path) -> None:
    source = corpus_root / EDGE_CASES
    result = runner.invoke(app, ["verify", str(source)])
    assert result.exit_code == 1
    malformed = [error.line_number for error in read_transcript(source.read_bytes()).errors]
    # The documented malformed lines: JSON string, object without type, number, array.
    assert {13, 14, 15, 16} <= set(malformed)
    for number in malformed:
        assert f"line {number}: error malformed_line" in result.stdout
    # The misspelt timestamp has a uuid: kept in the chain, reported (issue 15).
    assert "line 11: warning other_shape: user line its model refuses at timestamp, message" in result.stdout
    assert "FAILED" in result.stdout


def test_verify_json_output(corpus_root: Path) -> None:
    source = corpus_root / EDGE_CASES
    result = runner.invoke(app, ["verify", "--json", str(source)])
    assert result.exit_code == 1
    report = json.loads(result.stdout)
    assert report["ok"] is False
    malformed = {issue["line_numbers"][0] for issue in report["issues"] if issue["kind"] == "malformed_line"}
    assert {13, 14, 15, 16} <= malformed
    assert report["errors"] == sum(1 for issue in report["issues"] if issue["severity"] == "error")


def test_verify_clean_corpus_file_exits_zero(corpus_root: Path) -> None:
    result = runner.invoke(app, ["verify", str(corpus_root / TOOL_HEAVY)])
    assert result.exit_code == 0
    assert "OK" in result.stdout


def test_verify_reports_chain_breaks_and_placeholders(tmp_path: Path) -> None:
    lines = [
        {"type": "user", "uuid": "u1", "parentUuid": None, "timestamp": "2026-01-01T00:00:00.000Z",
         "message": {"role": "user", "content": "hi"}},
        {"type": "user", "uuid": "u2", "parentUuid": "missing", "timestamp": "2026-01-01T00:00:01.000Z",
         "message": {"role": "user", "content": [
             {"type": "tool_result", "tool_use_id": "t9", "content": SYNTHETIC_TOOL_RESULT_PLACEHOLDER}]}},
    ]  # fmt: skip
    source = tmp_path / "broken.jsonl"
    source.write_text("".join(json.dumps(line) + "\n" for line in lines))
    result = runner.invoke(app, ["verify", str(source)])
    assert result.exit_code == 1
    assert "line 2: error chain_break" in result.stdout
    assert "placeholder_result" in result.stdout
    assert "orphan_tool_result" in result.stdout


def test_verify_unreadable_file_is_a_usage_error(tmp_path: Path) -> None:
    result = runner.invoke(app, ["verify", str(tmp_path / "absent.jsonl")])
    assert result.exit_code == 2
    assert "cannot read" in result.stderr


# ---------------------------------------------------------------- repair
def test_repair_writes_a_clean_copy_and_never_touches_the_original(tmp_path: Path, corpus_root: Path) -> None:
    original = tmp_path / "edge.jsonl"
    original.write_bytes((corpus_root / EDGE_CASES).read_bytes())
    before = original.read_bytes()
    out = tmp_path / "out" / "repaired.jsonl"
    result = runner.invoke(app, ["repair", str(original), "--out", str(out)])
    assert result.exit_code == 0, result.output
    assert original.read_bytes() == before
    repaired = verify_transcript(read_transcript(out.read_bytes()))
    assert repaired.ok
    assert "dropped_malformed" in result.stdout
    assert out.stat().st_mode & 0o777 == 0o600


def test_repair_refuses_to_overwrite_the_original(tmp_path: Path, corpus_root: Path) -> None:
    original = tmp_path / "edge.jsonl"
    original.write_bytes((corpus_root / EDGE_CASES).read_bytes())
    before = original.read_bytes()
    for target in (original, tmp_path / "." / "edge.jsonl"):
        result = runner.invoke(app, ["repair", str(original), "--out", str(target), "--force"])
        assert result.exit_code == 2
        assert "original" in result.stderr
    assert original.read_bytes() == before


def test_repair_refuses_an_existing_output_without_force(tmp_path: Path, corpus_root: Path) -> None:
    out = tmp_path / "exists.jsonl"
    out.write_text("keep me\n")
    source = str(corpus_root / EDGE_CASES)
    refused = runner.invoke(app, ["repair", source, "--out", str(out)])
    assert refused.exit_code == 2
    assert "--force" in refused.stderr
    assert out.read_text() == "keep me\n"
    forced = runner.invoke(app, ["repair", source, "--out", str(out), "--force"])
    assert forced.exit_code == 0
    assert out.read_text() != "keep me\n"


# ---------------------------------------------------------------- export
def test_export_training_writes_the_api_view_of_a_clean_session(tmp_path: Path, corpus_root: Path) -> None:
    out = tmp_path / "train.json"
    result = runner.invoke(app, ["export", str(corpus_root / TOOL_HEAVY), "--training", "--out", str(out)])
    assert result.exit_code == 0, result.stderr
    body = json.loads(out.read_text())
    assert list(body) == ["messages"]
    assert body["messages"][0]["role"] == "user"


async def test_export_training_refuses_a_persisted_placeholder_result(tmp_path: Path) -> None:
    source = await _session(
        tmp_path,
        [
            create_user_message("run it", uuid="U0"),
            _assistant("A1", [ToolUseBlock(id="t1", name="Bash", input={})]),
            create_user_message(
                [ToolResultBlock(tool_use_id="t1", content=SYNTHETIC_TOOL_RESULT_PLACEHOLDER, is_error=True)],
                uuid="TR1",
                source_tool_assistant_uuid="A1",
            ),
            _assistant("A2", [TextBlock(text="done")]),
        ],
    )
    result = runner.invoke(app, ["export", str(source), "--training"])
    assert result.exit_code == 1
    assert result.stdout == ""
    assert "refusing training export" in result.stderr
    assert SYNTHETIC_TOOL_RESULT_PLACEHOLDER in result.stderr


async def test_export_training_refuses_a_placeholder_made_by_pairing_repair(tmp_path: Path) -> None:
    """R4.25–R4.29: a reply with two tool_uses and one result gets a synthetic result at send time."""
    source = await _session(
        tmp_path,
        [
            create_user_message("run both", uuid="U0"),
            _assistant(
                "A1", [ToolUseBlock(id="t1", name="Bash", input={}), ToolUseBlock(id="t2", name="Bash", input={})]
            ),
            create_user_message(
                [ToolResultBlock(tool_use_id="t1", content="ok")], uuid="TR1", source_tool_assistant_uuid="A1"
            ),
            _assistant("A2", [TextBlock(text="done")]),
        ],
    )
    refused = runner.invoke(app, ["export", str(source), "--training"])
    assert refused.exit_code == 1
    assert "placeholder" in refused.stderr
    # Without --training the view is exported, with a warning.
    plain = runner.invoke(app, ["export", str(source)])
    assert plain.exit_code == 0
    assert "warning" in plain.stderr
    assert SYNTHETIC_TOOL_RESULT_PLACEHOLDER in plain.stdout
