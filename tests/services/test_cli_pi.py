"""Issue 17: the CLI reads pi session files (detected from the header, P7.3) — real ``agentbus`` processes."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from agentbus_redis.api.validation import validate_api_request
from agentbus_redis.ids import random_uuid
from agentbus_redis.messages.constants import SYNTHETIC_TOOL_RESULT_PLACEHOLDER
from agentbus_redis.pi.messages import PiAssistantMessage, PiToolResultMessage
from agentbus_redis.pi.request import llm_view
from agentbus_redis.pi.session import read_pi_session
from tests.conftest import corpus_cases
from tests.shared.generated_sessions import GENERATED_SESSIONS
from tests.shared.pi.generated import late_result, tool_rounds

PI_FILES = corpus_cases("pi")
USER_SIDE = {"user", "bashExecution", "custom", "compactionSummary", "branchSummary"}


def agentbus(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "agentbus_redis.cli.main", *args],
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
    )


def test_normalize_builds_ours_and_rules_pi_prints_pis_own(tmp_path: Path) -> None:
    path = tmp_path / "late.jsonl"
    path.write_bytes(late_result())
    ours = agentbus("normalize", str(path), "--prompt", "continue")
    assert ours.returncode == 0, ours.stderr
    assert validate_api_request(json.loads(ours.stdout)) == []
    own = agentbus("normalize", str(path), "--rules", "pi")
    body = json.loads(own.stdout)
    # P9.2: pi inserts "No result provided" before the bash message and still sends the late result.
    assert "No result provided" in own.stdout
    assert "orphan_tool_result" in {violation.rule for violation in validate_api_request(body)}


def test_normalize_refuses_rules_pi_on_claude_code_and_format_pi_on_other_files(tmp_path: Path) -> None:
    path = tmp_path / "cc.jsonl"
    path.write_text('{"type":"user","uuid":"u1","parentUuid":null,"message":{"role":"user","content":"hi"}}\n')
    refused = agentbus("normalize", str(path), "--rules", "pi")
    assert refused.returncode == 2
    assert refused.stderr.count("\n") == 1
    forced = agentbus("normalize", str(path), "--format", "pi")
    assert forced.returncode == 1
    assert "not a pi session" in forced.stderr


def test_verify_reports_the_late_result_and_repair_moves_it_up(tmp_path: Path) -> None:
    """P9: verify flags the late result (error); repair moves it to its call; pi's own request then has
    no orphan result (P9.2's advice)."""
    path, out = tmp_path / "late.jsonl", tmp_path / "repaired.jsonl"
    path.write_bytes(late_result())
    verify = agentbus("transcript", "verify", str(path))
    assert verify.returncode == 1
    assert "late_result" in verify.stdout
    repair = agentbus("transcript", "repair", str(path), "--out", str(out))
    assert repair.returncode == 0, repair.stderr
    assert "moved_late_result" in repair.stdout
    assert "0 error(s) left" in repair.stdout
    assert agentbus("transcript", "verify", str(out)).returncode == 0
    own = json.loads(agentbus("normalize", str(out), "--rules", "pi").stdout)
    assert "orphan_tool_result" not in {violation.rule for violation in validate_api_request(own)}


def test_convert_pi_to_claude_code_and_back_is_lossless(tmp_path: Path) -> None:
    """P10: pi → Claude Code → pi gives the same session (JSON-equal)."""
    path, cc = tmp_path / "rounds.jsonl", tmp_path / "rounds.cc.jsonl"
    path.write_bytes(tool_rounds())
    assert agentbus("transcript", "convert", str(path), "--to", "claude-code", "--out", str(cc)).returncode == 0
    assert agentbus("transcript", "verify", str(cc)).returncode == 0
    back = agentbus("transcript", "convert", str(cc), "--to", "pi")
    assert back.returncode == 0, back.stderr
    assert [json.loads(line) for line in back.stdout.splitlines()] == [
        json.loads(line) for line in path.read_text().splitlines()
    ]
    export = agentbus("transcript", "export", str(path))
    assert export.returncode == 0
    assert json.loads(export.stdout)["messages"][0]["role"] == "user"


def request_counts(body: dict[str, Any]) -> tuple[int, int, int, int]:
    """Prompts (user-side text blocks), calls, results, and results that are agentbus' placeholder."""
    prompts = calls = results = placeholders = 0
    for message in body["messages"]:
        content = message["content"]
        blocks = [{"type": "text", "text": content}] if isinstance(content, str) else content
        prompts += sum(block["type"] == "text" for block in blocks) if message["role"] == "user" else 0
        calls += sum(block["type"] == "tool_use" for block in blocks)
        results += sum(block["type"] == "tool_result" for block in blocks)
        placeholders += sum(
            block["type"] == "tool_result" and block.get("content") == SYNTHETIC_TOOL_RESULT_PLACEHOLDER
            for block in blocks
        )
    return prompts, calls, results, placeholders


def context_counts(path: Path) -> tuple[int, int, int]:
    """The same counts in the context pi rebuilds (P8): user-side messages (P4), calls of turns that did
    not fail (P5.6 b drops the others), recorded results."""
    messages = llm_view(read_pi_session(path.read_bytes(), ids=random_uuid)).context.messages
    prompts = sum(message.role in USER_SIDE for message in messages)
    calls = sum(
        len(message.tool_calls())
        for message in messages
        if isinstance(message, PiAssistantMessage) and not message.failed
    )
    return prompts, calls, sum(isinstance(message, PiToolResultMessage) for message in messages)


@pytest.mark.parametrize("path", PI_FILES, ids=lambda p: p.name if p else "corpus-missing")
def test_issue_17_done_when_normalize_keeps_every_prompt_call_and_result(path: Path) -> None:
    """Issue 17: ``agentbus normalize`` of each pi corpus file gives a request ``validate_api_request``
    accepts, with every prompt, call and recorded result of the context; only calls without a recorded
    result get agentbus' placeholder (before-compaction line 627, P9.6)."""
    done = agentbus("normalize", str(path), "--prompt", "continue")
    assert done.returncode == 0, done.stderr
    body = json.loads(done.stdout)
    assert validate_api_request(body) == []
    prompts, calls, results, placeholders = request_counts(body)
    own_prompts, own_calls, own_results = context_counts(path)
    assert (prompts, calls) == (own_prompts + 1, own_calls)  # + the appended prompt
    assert results - placeholders == own_results
    assert placeholders == calls - own_results


@pytest.mark.parametrize("name", sorted(GENERATED_SESSIONS))
def test_convert_claude_code_to_pi_keeps_every_call_and_result_on_pis_path(name: str, tmp_path: Path) -> None:
    """P10 back: a Claude Code transcript (parallel results written as siblings, metadata and progress
    lines off the chain, R7.x) becomes a pi session whose context (P8) holds every call and result."""
    source, converted = tmp_path / "cc.jsonl", tmp_path / "pi.jsonl"
    source.write_bytes(GENERATED_SESSIONS[name]() + b'{"type":"custom-title","customTitle":"t","sessionId":"x"}\n')
    assert agentbus("transcript", "convert", str(source), "--to", "pi", "--out", str(converted)).returncode == 0
    cc = json.loads(agentbus("normalize", str(source), "--prompt", "go on").stdout)
    done = agentbus("normalize", str(converted), "--prompt", "go on")
    assert done.returncode == 0, done.stderr
    pi = json.loads(done.stdout)
    assert validate_api_request(pi) == []
    assert call_ids(cc) <= call_ids(pi)  # Claude Code's resume drops an interrupted call (R7.17); pi keeps it
    assert request_counts(pi)[1] == request_counts(pi)[2]


def call_ids(body: dict[str, Any]) -> set[str]:
    return {
        block["id"]
        for message in body["messages"]
        if isinstance(message["content"], list)
        for block in message["content"]
        if block["type"] == "tool_use"
    }
