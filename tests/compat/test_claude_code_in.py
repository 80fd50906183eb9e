"""Claude Code 2.1.332's own fresh files into agentbus: the request agentbus builds is the one the client sends.

The files come from the real client run offline against the capture server (tests/compat/sessions.py):
parallel and failing tools with signed thinking, ``--resume``, ``--continue``, ``--fork-session``, a
permission denial, a background sub-agent and its own file. For each, the request Claude Code sent when it
resumed the file (``claude -p PROMPT --resume ID``) must be what ``agentbus normalize FILE --prompt PROMPT``
prints — messages, ``role: "system"`` ones included; the system prompt and the tool list aside — and it
must pass agentbus' API validator, which follows today's API (anthropic SDK 2.13 ``BetaMessageParam``:
``role: "system"`` messages with ``output_config``, where anthropic-api-rules.md §1.6 still says "user or
assistant"; the client and SDK win).
"""

from __future__ import annotations

from pathlib import Path
from typing import cast

import pytest

from agentbus_redis.api.types import MessagesRequest
from agentbus_redis.api.validation import validate_api_request
from agentbus_redis.messages.constants import CONTINUE_FROM_WHERE_YOU_LEFT_OFF, NO_RESPONSE_REQUESTED
from tests.compat.requests import (
    client_messages_as_agentbus_reads_them,
    first_difference,
    normalize,
    run_agentbus,
)
from tests.compat.sessions import FreshFile

pytestmark = pytest.mark.slow

RESUMED_FILES = ["parallel-tools", "resume", "continue", "fork", "permission-denied", "subagent"]


def fresh(files: list[FreshFile], name: str) -> FreshFile:
    return next(f for f in files if f.name == name)


@pytest.mark.parametrize("name", RESUMED_FILES)
def test_normalize_is_the_request_claude_code_sends_on_resume(
    claude_code_files: list[FreshFile], name: str, tmp_path: Path
) -> None:
    file = fresh(claude_code_files, name)
    assert file.prompt is not None
    ours, outcome = normalize(file.path, "--prompt", file.prompt, cwd=tmp_path)
    assert outcome.stderr == ""
    client = client_messages_as_agentbus_reads_them(file.request["messages"], ours)
    assert ours == client, first_difference(client, ours)


@pytest.mark.parametrize("name", RESUMED_FILES)
def test_the_request_passes_the_validator(claude_code_files: list[FreshFile], name: str, tmp_path: Path) -> None:
    file = fresh(claude_code_files, name)
    assert file.prompt is not None
    ours, _ = normalize(file.path, "--prompt", file.prompt, cwd=tmp_path)
    assert any(message["role"] == "system" for message in ours)
    assert validate_api_request(ours) == []
    # The client's own request, whole, as it went out (thinking config and all): today's API takes it.
    assert validate_api_request(cast("MessagesRequest", file.request)) == []


def test_a_subagent_file_is_its_last_request_and_no_reminder_lands_in_a_tool_result(
    claude_code_files: list[FreshFile], tmp_path: Path
) -> None:
    """The sub-agent's file, built up to the line before its last reply, is the sub-agent's last request
    (its agent listing a ``role: "system"`` message after the tool result, not text inside it), followed
    only by what a resume of a turn stopped after its tool results adds (R7.20: the continuation prompt,
    which merges into that user message, and the reply placeholder)."""
    file = fresh(claude_code_files, "subagent-file")
    assert file.leaf is not None
    ours, _ = normalize(file.path, "--leaf", file.leaf, cwd=tmp_path)
    for message in ours:
        for block in message["content"] if isinstance(message["content"], list) else []:
            if block.get("type") == "tool_result":
                assert "<system-reminder>" not in str(block.get("content")), block
    assert ours[-1] == {"role": "assistant", "content": [{"type": "text", "text": NO_RESPONSE_REQUESTED}]}
    continuation = {"type": "text", "text": CONTINUE_FROM_WHERE_YOU_LEFT_OFF}
    resumed_turn = [
        {**message, "content": [block for block in message["content"] if block != continuation]}
        if isinstance(message["content"], list)
        else message
        for message in ours[:-1]
    ]
    assert resumed_turn != ours[:-1], "the resume's continuation prompt is missing"
    client = client_messages_as_agentbus_reads_them(file.request["messages"], resumed_turn)
    assert resumed_turn == client, first_difference(client, resumed_turn)


@pytest.mark.parametrize("name", [*RESUMED_FILES, "subagent-file"])
def test_verify_passes(claude_code_files: list[FreshFile], name: str, tmp_path: Path) -> None:
    file = fresh(claude_code_files, name)
    outcome = run_agentbus("transcript", "verify", str(file.path), cwd=tmp_path)
    assert outcome.code == 0, outcome.stdout + outcome.stderr
