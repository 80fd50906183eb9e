"""Run ``agentbus`` as a user does: a separate process (``python -m agentbus_redis.cli.main``), in an empty
working directory (no ``.env`` of the checkout leaks in), with a chosen environment."""

from __future__ import annotations

import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]
AGENTBUS = [sys.executable, "-m", "agentbus_redis.cli.main"]


@dataclass(frozen=True)
class Outcome:
    code: int
    stdout: str
    stderr: str

    @property
    def error_line(self) -> str:
        """The single line a failing command prints on stderr (asserts there is exactly one)."""
        assert "Traceback" not in self.stderr, self.stderr
        lines = self.stderr.splitlines()
        assert len(lines) == 1, self.stderr
        return lines[0]


def cli_env(redis_url: str | None = None, **extra: str) -> dict[str, str]:
    """The caller's environment without agentbus settings, plus ``extra``."""
    env = {
        name: value
        for name, value in os.environ.items()
        if not name.startswith("AGENTBUS_") and name not in {"REDIS_URL", "LOG_LEVEL"}
    }
    env["PYTHONPATH"] = str(REPO_ROOT)
    if redis_url is not None:
        env["REDIS_URL"] = redis_url
    env.update(extra)
    return env


def agentbus(*args: str, cwd: Path, env: dict[str, str], timeout_s: float = 60) -> Outcome:
    """Run ``agentbus ARGS`` to completion."""
    done = subprocess.run(
        [*AGENTBUS, *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout_s, check=False
    )
    return Outcome(done.returncode, done.stdout, done.stderr)
