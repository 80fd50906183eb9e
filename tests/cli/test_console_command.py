"""``agentbus worker console`` refuses to start without a token, in one line (issue 30: nothing opens
without one)."""

from __future__ import annotations

from pathlib import Path

from tests.cli.process import agentbus, cli_env


def test_the_console_refuses_to_start_without_a_token(tmp_path: Path) -> None:
    outcome = agentbus("worker", "console", "--port", "0", cwd=tmp_path, env=cli_env())  # no AGENTBUS_* at all
    assert outcome.code == 1
    assert outcome.stderr.strip().splitlines() == [
        "agentbus: AGENTBUS_CONSOLE__TOKEN (or AGENTBUS_CONSOLE__READ_ONLY_TOKEN) is not set: the console opens "
        "to no one without a token (`agentbus up` generates one and prints it)"
    ]
