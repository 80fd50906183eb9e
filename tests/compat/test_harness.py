"""The harness itself: the real clients run offline against the capture server and write their files."""

from __future__ import annotations

import pytest

from tests.compat.sessions import FreshFile

pytestmark = pytest.mark.slow


def test_claude_code_writes_every_scenario(claude_code_files: list[FreshFile]) -> None:
    names = [fresh.name for fresh in claude_code_files]
    assert names == ["parallel-tools", "resume", "continue", "fork", "permission-denied", "subagent", "subagent-file"]
    for fresh in claude_code_files:
        assert fresh.path.is_file(), fresh.name
        assert fresh.request["messages"], fresh.name


def test_pi_writes_its_sessions(pi_files: list[FreshFile]) -> None:
    for fresh in pi_files:
        assert fresh.path.is_file(), fresh.name
        assert fresh.request["messages"], fresh.name
