"""pi 0.73.1's own fresh session files into agentbus (tests/compat/sessions.py: signed thinking, parallel
tools of which one fails, ``--continue``), pi run offline through a ``models.json`` provider with
``api: "anthropic-messages"`` at the capture server.

``agentbus normalize --rules pi`` rebuilds the request pi itself sent at that entry, and agentbus' own
request keeps pi's signed thinking as thinking (the session's model speaks the Messages API: pi sends its
next request there, P5.2), never as plain text.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.compat.requests import client_messages_as_agentbus_reads_them, first_difference, normalize, run_agentbus
from tests.compat.sessions import FreshFile

pytestmark = pytest.mark.slow

PI_FILES = ["pi-tools-thinking", "pi-continue"]


def fresh(files: list[FreshFile], name: str) -> FreshFile:
    return next(f for f in files if f.name == name)


@pytest.mark.parametrize("name", PI_FILES)
def test_rules_pi_is_the_request_pi_sent(pi_files: list[FreshFile], name: str, tmp_path: Path) -> None:
    file = fresh(pi_files, name)
    assert file.leaf is not None
    ours, _ = normalize(file.path, "--leaf", file.leaf, "--rules", "pi", cwd=tmp_path)
    client = client_messages_as_agentbus_reads_them(file.request["messages"], ours)
    assert ours == client, first_difference(client, ours)


@pytest.mark.parametrize("name", PI_FILES)
def test_signed_thinking_stays_thinking(pi_files: list[FreshFile], name: str, tmp_path: Path) -> None:
    file = fresh(pi_files, name)
    assert file.leaf is not None
    sent = [
        (block["thinking"], block["signature"])
        for message in file.request["messages"]
        for block in message["content"]
        if isinstance(message["content"], list) and block["type"] == "thinking"
    ]
    assert sent, "pi sent no thinking"
    ours, _ = normalize(file.path, "--leaf", file.leaf, cwd=tmp_path)
    kept = [
        (block["thinking"], block["signature"])
        for message in ours
        for block in message["content"]
        if isinstance(message["content"], list) and block["type"] == "thinking"
    ]
    texts = {
        block["text"]
        for message in ours
        for block in message["content"]
        if isinstance(message["content"], list) and block["type"] == "text"
    }
    assert not texts & {thinking for thinking, _ in sent}, "signed thinking became text"
    if name == "pi-continue":  # ends on a new prompt: every turn is closed, all thinking is replayed
        assert kept == sent
    else:  # ends in a tool loop: without a thinking config (normalize's default) the open turn carries none
        assert kept == sent[:-1]


@pytest.mark.parametrize("name", PI_FILES)
def test_verify_passes(pi_files: list[FreshFile], name: str, tmp_path: Path) -> None:
    outcome = run_agentbus("transcript", "verify", str(fresh(pi_files, name).path), cwd=tmp_path)
    assert outcome.code == 0, outcome.stdout + outcome.stderr
