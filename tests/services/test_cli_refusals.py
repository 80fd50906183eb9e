"""Issue 16, "commands that tell the truth", through the real ``agentbus`` process: ``normalize`` without
``--prompt`` prints the resumed history (exit 0) and says in one line when it could not be sent as it
stands (``--check``: exit 1); ``normalize``, ``transcript export [--training]`` and ``replay`` refuse an
empty, binary or non-JSONL file, or one without a conversation, with the file, line and reason (exit 1)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from agentbus_redis.cli.main import app

UNREACHABLE_REDIS = "redis://127.0.0.1:1/0"
"""Refusals happen before any connection: ``replay`` must not need a bus to refuse a file."""

BAD_FILES: dict[str, tuple[bytes, str]] = {
    "empty": (b"", "empty file"),
    "binary": (b"\x7fELF\x02\x01\x01\x00\x00\x00\xff\xfe\n\x00\x00", "line 1: binary data, not UTF-8 text"),
    "text": (b"# notes\nnot json at all\n", "line 1: not a JSONL transcript"),
    "json_array": (b'[{"type": "user"}]\n', "line 1: not a JSONL transcript"),
    "metadata_only": (b'{"type":"summary","summary":"s","leafUuid":"x"}\n', "no user or assistant message"),
}
COMMANDS = {
    "normalize": ["normalize"],
    "export": ["transcript", "export"],
    "export_training": ["transcript", "export", "--training"],
    "replay": ["replay"],
}


def agentbus(*args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "REDIS_URL": UNREACHABLE_REDIS}
    return subprocess.run(
        [sys.executable, "-m", "agentbus_redis.cli.main", *args],
        env=env,
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
    )


def _assert_refused(code: int, stdout: str, stderr: str, path: Path, reason: str) -> None:
    assert code == 1, stderr
    assert stdout == ""
    assert "Traceback" not in stderr
    lines = stderr.splitlines()
    assert len(lines) == 1, stderr
    assert lines[0].startswith(f"agentbus: {path}: ")
    assert reason in lines[0]


@pytest.mark.parametrize("kind", BAD_FILES)
@pytest.mark.parametrize("command", COMMANDS)
def test_unusable_file_is_refused_with_file_line_and_reason(command: str, kind: str, tmp_path: Path) -> None:
    """Every command × every kind of unusable file, in-process (the root app, as the script runs it)."""
    data, reason = BAD_FILES[kind]
    path = tmp_path / f"{kind}.jsonl"
    path.write_bytes(data)
    result = CliRunner().invoke(app, [*COMMANDS[command], str(path)], env={"REDIS_URL": UNREACHABLE_REDIS})
    _assert_refused(result.exit_code, result.stdout, result.stderr, path, reason)


@pytest.mark.parametrize(("command", "kind"), [("replay", "binary"), ("export_training", "text"), ("export", "empty")])
def test_unusable_file_is_refused_by_the_real_process(command: str, kind: str, tmp_path: Path) -> None:
    data, reason = BAD_FILES[kind]
    path = tmp_path / f"{kind}.jsonl"
    path.write_bytes(data)
    done = agentbus(*COMMANDS[command], str(path))
    _assert_refused(done.returncode, done.stdout, done.stderr, path, reason)


def test_normalize_without_prompt_prints_the_history_and_says_why_it_is_not_sendable(corpus_root: Path) -> None:
    source = corpus_root / "claude-code/marot__spotter/short.jsonl"
    done = agentbus("normalize", str(source))
    assert done.returncode == 0, done.stderr
    body = json.loads(done.stdout)
    assert body["messages"][-1]["role"] == "assistant"  # the resumed history as it stands
    (line,) = done.stderr.splitlines()
    assert line.startswith(f"agentbus: {source}: not sendable as it stands: API rule prefill_not_supported")
    assert "--prompt" in line

    checked = agentbus("normalize", "--check", str(source))
    assert checked.returncode == 1
    assert json.loads(checked.stdout) == body
    assert checked.stderr == done.stderr
