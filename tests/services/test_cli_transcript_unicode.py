"""Issue 15: ``agentbus normalize`` / ``agentbus transcript export`` / ``verify`` on transcripts with a lone
surrogate escape (``"\\ud83d"`` in a tool_result) or an invalid UTF-8 byte. Writing to stdout runs the
installed script in a subprocess (a real stdout, not a test runner's buffer); the rest runs in process.
Before: ``UnicodeEncodeError``, nothing written; the invalid byte dropped its line and broke the chain."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from typer.testing import CliRunner

from agentbus_redis.api.validation import validate_api_request
from agentbus_redis.cli.transcript import app as transcript_app
from tests.shared.transcript_builders import assistant, jsonl, tool_result, tool_use, user

SCRIPT = Path(sys.executable).with_name("agentbus")


def _session(tool_output: str) -> str:
    return jsonl(
        user("u1", None, "list files", second=0),
        assistant("a1", "u1", [tool_use("t1")], second=1),
        user("r1", "a1", [tool_result("t1", tool_output)], second=2, sourceToolAssistantUUID="a1"),
        assistant("a2", "r1", [{"type": "text", "text": "done"}], second=3),
    )


def _run(*args: str) -> subprocess.CompletedProcess[bytes]:
    # Bytes, so the test sees exactly what was written (and a decode error would fail it).
    return subprocess.run([str(SCRIPT), *args], capture_output=True, check=False)


def _lone_surrogate_file(tmp_path: Path) -> Path:
    path = tmp_path / "surrogate.jsonl"
    # json.dumps writes the cut emoji as the escape ``\ud83d``: valid JSON, not encodable as UTF-8.
    path.write_text(_session("emoji cut here: \ud83d"), encoding="utf-8")
    assert b"\\ud83d" in path.read_bytes()
    return path


def test_issue15_normalize_prints_valid_utf8_json_with_u_fffd_and_one_stderr_line(tmp_path: Path) -> None:
    source = _lone_surrogate_file(tmp_path)
    completed = _run("normalize", str(source), "--prompt", "next")
    assert completed.returncode == 0, completed.stderr.decode()
    body = json.loads(completed.stdout.decode("utf-8"))  # strict decode: valid UTF-8
    assert validate_api_request(body["messages"]) == []
    result = body["messages"][2]["content"][0]
    assert result["content"] == "emoji cut here: \ufffd"
    stderr_lines = completed.stderr.decode("utf-8").splitlines()
    assert stderr_lines == [
        f"agentbus: {source}: replaced 1 lone surrogate(s) (unpaired \\ud800-\\udfff) with U+FFFD in the output"
    ]


def test_issue15_transcript_export_prints_and_writes_valid_output(tmp_path: Path) -> None:
    source = _lone_surrogate_file(tmp_path)
    completed = _run("transcript", "export", str(source))
    assert completed.returncode == 0, completed.stderr.decode()
    body = json.loads(completed.stdout.decode("utf-8"))
    assert "\ufffd" in json.dumps(body, ensure_ascii=False)
    assert b"lone surrogate" in completed.stderr
    out = tmp_path / "export.json"
    written = CliRunner().invoke(transcript_app, ["export", str(source), "--out", str(out)])
    assert written.exit_code == 0, written.output
    assert json.loads(out.read_bytes().decode("utf-8")) == body


def test_issue15_invalid_byte_keeps_the_line_and_is_reported(tmp_path: Path) -> None:
    source = tmp_path / "latin1.jsonl"
    source.write_bytes(_session("café").encode().replace(b"caf\\u00e9", b"caf\xe9"))
    completed = _run("normalize", str(source), "--prompt", "next")
    assert completed.returncode == 0, completed.stderr.decode()
    body = json.loads(completed.stdout.decode("utf-8"))
    assert body["messages"][2]["content"][0]["content"] == "caf\ufffd"  # line 3 kept, chain whole
    assert body["messages"][3]["content"] == [{"type": "text", "text": "done"}]
    assert completed.stderr.decode().splitlines() == [
        f"agentbus: {source}: warning: line 3: invalid_utf8: 1 invalid UTF-8 byte sequence(s) read as U+FFFD"
    ]
    verified = CliRunner().invoke(transcript_app, ["verify", str(source)])
    assert verified.exit_code == 0, verified.stdout
    assert "line 3: warning invalid_utf8: 1 invalid UTF-8 byte sequence(s) read as U+FFFD" in verified.stdout


def test_issue15_repair_keeps_a_line_with_an_invalid_byte_and_says_it_is_written_as_u_fffd(tmp_path: Path) -> None:
    source = tmp_path / "latin1.jsonl"
    source.write_bytes(_session("cafe").encode().replace(b'"cafe"', b'"caf\xe9"'))
    out = tmp_path / "repaired.jsonl"
    result = CliRunner().invoke(transcript_app, ["repair", str(source), "--out", str(out)])
    assert result.exit_code == 0, result.output
    assert "line 3: warning invalid_utf8: 1 invalid UTF-8 byte sequence(s) read as U+FFFD" in result.stdout
    repaired = out.read_bytes().decode("utf-8").splitlines()
    assert len(repaired) == 4  # before: line 3 was dropped as malformed
    assert json.loads(repaired[2])["message"]["content"][0]["content"] == "caf\ufffd"
