"""``agentbus normalize FILE --prompt TEXT [--leaf UUID]`` on the whole corpus (issue 3, "done when")."""

from __future__ import annotations

import json
import subprocess
import sys
from collections import defaultdict
from pathlib import Path
from typing import Any

import pytest
import typer
from typer.testing import CliRunner

from agentbus_redis.api.validation import validate_api_request
from agentbus_redis.cli.normalize import normalize_command
from agentbus_redis.messages.constants import SYNTHETIC_TOOL_RESULT_PLACEHOLDER
from tests.conftest import CORPUS_ROOT, corpus_cases

CORPUS_FILES = corpus_cases("claude-code")
COMPACTED = [
    "marot__spotter/258c7280-ae70-4798-800f-63464d01a85d.jsonl",
    "CH-chuan__CommuGraph/ab51623b-c26d-45f5-b98e-f9d0cfa17018.jsonl",
]
runner = CliRunner()
# The command alone, as `agentbus normalize` registers it (main.py is shared with other sub-apps).
app = typer.Typer()
app.command("normalize")(normalize_command)
app.command("unused")(lambda: None)  # two commands, so typer keeps the "normalize" sub-command name


def _name(path: Path) -> str:
    return str(path.relative_to(CORPUS_ROOT / "claude-code"))


def normalize(*args: str) -> tuple[int, dict[str, Any] | None, str]:
    result = runner.invoke(app, ["normalize", *args])
    body = json.loads(result.stdout) if result.stdout.strip() else None
    return result.exit_code, body, result.stderr


def _text_of(content: Any) -> str:
    if isinstance(content, str):
        return content
    return "".join(block.get("text", "") for block in content if isinstance(block, dict))


def _blocks(body: dict[str, Any], role: str, kind: str) -> list[dict[str, Any]]:
    return [
        block
        for message in body["messages"]
        if message["role"] == role and isinstance(message["content"], list)
        for block in message["content"]
        if block.get("type") == kind
    ]


@pytest.mark.parametrize("source", CORPUS_FILES, ids=_name)
def test_normalize_with_prompt_is_accepted_by_the_api_for_every_corpus_file(source: Path, corpus_root: Path) -> None:
    code, body, stderr = normalize(str(source), "--prompt", "continue")
    assert code == 0, stderr
    assert body is not None
    assert list(body) == ["messages"]
    assert validate_api_request(body["messages"]) == []
    last = body["messages"][-1]
    assert last["role"] == "user"
    assert _text_of(last["content"]).endswith("continue")
    if "agent-" not in source.name and "edge_cases" not in source.name:
        assert len(body["messages"]) > 1, "the resumed history must not be empty"


def test_subagent_files_resume_their_sidechain(corpus_root: Path) -> None:
    source = (
        corpus_root / "claude-code/marot__spotter/258c7280-ae70-4798-800f-63464d01a85d/subagents/agent-a881341.jsonl"
    )
    code, body, _ = normalize(str(source), "--prompt", "continue")
    assert code == 0
    assert body is not None
    assert len(_blocks(body, "assistant", "tool_use")) == 2


def test_tool_heavy_keeps_both_parallel_calls_and_both_real_results(corpus_root: Path) -> None:
    """R7.18: the reply split over two tool_use lines whose results hang off their own lines."""
    source = corpus_root / "claude-code/marot__spotter/tool_heavy.jsonl"
    calls_by_reply: dict[str, list[str]] = defaultdict(list)
    result_text: dict[str, str] = {}
    for raw in source.read_text().splitlines():
        line = json.loads(raw)
        content = line.get("message", {}).get("content")
        if not isinstance(content, list):
            continue
        for block in content:
            if line["type"] == "assistant" and block["type"] == "tool_use":
                calls_by_reply[line["message"]["id"]].append(block["id"])
            elif block["type"] == "tool_result":
                result_text[block["tool_use_id"]] = _text_of(block["content"])
    parallel = [ids for ids in calls_by_reply.values() if len(ids) > 1]
    assert parallel, "tool_heavy.jsonl has parallel tool calls"

    code, body, stderr = normalize(str(source), "--prompt", "continue")
    assert code == 0, stderr
    assert body is not None
    requested_calls = {block["id"] for block in _blocks(body, "assistant", "tool_use")}
    requested_results = {block["tool_use_id"]: block for block in _blocks(body, "user", "tool_result")}
    for ids in parallel:
        for tool_use_id in ids:
            assert tool_use_id in requested_calls
            result = requested_results[tool_use_id]
            assert _text_of(result["content"]) == result_text[tool_use_id]
            assert _text_of(result["content"]) != SYNTHETIC_TOOL_RESULT_PLACEHOLDER


@pytest.mark.parametrize("relative", COMPACTED)
def test_compacted_sessions_start_at_the_summary(relative: str, corpus_root: Path) -> None:
    source = corpus_root / "claude-code" / relative
    summaries = [
        _text_of(line["message"]["content"])
        for line in map(json.loads, source.read_text().splitlines())
        if line.get("isCompactSummary")
    ]
    code, body, _ = normalize(str(source), "--prompt", "continue")
    assert code == 0
    assert body is not None
    first = body["messages"][0]
    assert first["role"] == "user"
    assert _text_of(first["content"]).startswith(summaries[-1])


def test_leaf_selects_an_earlier_chain(corpus_root: Path) -> None:
    source = corpus_root / "claude-code/marot__spotter/short.jsonl"
    lines = [json.loads(raw) for raw in source.read_text().splitlines()]
    first_user = next(line for line in lines if line["type"] == "user" and not line.get("isMeta"))
    code, body, stderr = normalize(str(source), "--leaf", first_user["uuid"], "--prompt", "again")
    assert code == 0, stderr
    assert body is not None
    full_code, full_body, _ = normalize(str(source), "--prompt", "again")
    assert full_code == 0
    assert full_body is not None
    assert len(body["messages"]) < len(full_body["messages"])
    assert validate_api_request(body["messages"]) == []


def test_unknown_leaf_fails_on_stderr(corpus_root: Path) -> None:
    code, body, stderr = normalize(str(corpus_root / "claude-code/marot__spotter/short.jsonl"), "--leaf", "nope")
    assert code == 1
    assert body is None
    assert "nope" in stderr


def test_missing_file_fails_on_stderr(tmp_path: Path) -> None:
    code, body, stderr = normalize(str(tmp_path / "absent.jsonl"))
    assert code == 2
    assert body is None
    assert "cannot read" in stderr


def test_issue15_chain_lines_no_model_accepts_are_walked_through_and_listed_on_stderr(tmp_path: Path) -> None:
    lines = [
        {
            "type": "user",
            "uuid": "u1",
            "parentUuid": None,
            "timestamp": "2026-01-01T00:00:00.000Z",
            "message": {"role": "user", "content": "one"},
        },
        {"type": "user", "uuid": "x1", "parentUuid": "u1", "timestamp": "2026-01-01T00:00:01.000Z", "message": "error"},
        {
            "type": "user",
            "uuid": "u2",
            "parentUuid": "x1",
            "timestamp": "2026-01-01T00:00:02.000Z",
            "message": {"role": "user", "content": "two"},
        },
    ]
    source = tmp_path / "other.jsonl"
    source.write_text("".join(json.dumps(line) + "\n" for line in lines))
    code, body, stderr = normalize(str(source), "--prompt", "next")
    assert code == 0, stderr
    assert body is not None
    text = json.dumps(body)
    assert '"one' in text  # the chain was walked through x1 to the root
    assert '"two"' in text
    assert '"error"' not in text
    assert "left 1 chain line(s) no model accepts out of the API view (uuid x1;" in stderr


def test_malformed_lines_are_listed_on_stderr(corpus_root: Path) -> None:
    code, _, stderr = normalize(
        str(corpus_root / "claude-code/daaain__claude-code-log/edge_cases.jsonl"), "--prompt", "x"
    )
    assert code == 0
    assert "skipped malformed line(s)" in stderr
    assert "13, 14, 15, 16" in stderr


def test_empty_file_without_prompt_is_an_error(tmp_path: Path) -> None:
    empty = tmp_path / "empty.jsonl"
    empty.write_text("")
    code, body, stderr = normalize(str(empty))
    assert code == 1
    assert body is None
    assert "empty file" in stderr
    assert "--prompt" in stderr


def test_installed_agentbus_script_runs_normalize(corpus_root: Path) -> None:
    """The pyproject script entry point, end to end in a subprocess."""
    script = Path(sys.executable).with_name("agentbus")
    source = corpus_root / "claude-code/marot__spotter/short.jsonl"
    completed = subprocess.run(
        [str(script), "normalize", str(source), "--prompt", "continue"], capture_output=True, text=True, check=False
    )
    assert completed.returncode == 0, completed.stderr
    body = json.loads(completed.stdout)
    assert validate_api_request(body["messages"]) == []


def test_agentbus_root_app_registers_normalize_and_transcript() -> None:
    from agentbus_redis.cli.main import app as root

    group: Any = typer.main.get_command(root)  # the root loads a command when asked for it by name
    context = group.make_context("agentbus", [], resilient_parsing=True)
    assert group.get_command(context, "normalize").name == "normalize"
    assert "verify" in group.get_command(context, "transcript").commands


@pytest.mark.parametrize("source", CORPUS_FILES, ids=_name)
def test_normalize_without_prompt_prints_the_history_for_every_corpus_file(source: Path, corpus_root: Path) -> None:
    """Issue 16: without --prompt the resumed history is printed (exit 0); a history that could not be sent
    as it stands is said in one line on stderr, and --check turns that into exit 1."""
    code, body, stderr = normalize(str(source))
    assert code == 0, stderr
    assert body is not None
    assert list(body) == ["messages"]
    assert body["messages"]
    unsendable = [line for line in stderr.splitlines() if "not sendable as it stands" in line]
    assert len(unsendable) == (1 if validate_api_request(body["messages"]) else 0)
    checked, _, _ = normalize(str(source), "--check")
    assert checked == (1 if unsendable else 0)
