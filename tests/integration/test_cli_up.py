"""``agentbus up``, the README's first command, on a machine where no Redis is reachable: it starts a
private Redis (AOF, under the default relative data dir), every worker type as its own process, runs
the demo session (real tool calls, a transcript, API requests), and a Ctrl-C stops everything cleanly —
workers first (graceful SIGTERM), then the Redis they were writing to."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from services.runtime.local_redis import free_port, is_reachable

pytestmark = [pytest.mark.integration, pytest.mark.slow]


def _up(cwd: Path, redis_port: int, *args: str) -> subprocess.Popen[str]:
    env = {
        **os.environ,
        "REDIS_URL": f"redis://127.0.0.1:{redis_port}/0",
        "AGENTBUS_DATA_DIR": "data",  # the default, relative to where `up` runs
        "AGENTBUS_TOOLS__WORKSPACE": "workspace",
    }
    command = [sys.executable, "-m", "services.cli.main", "up", "--base-port", str(free_port()), *args]
    # Its own session, as a terminal's job is: the test delivers Ctrl-C to that whole process group.
    return subprocess.Popen(
        command,
        cwd=cwd,
        env={**env, "PYTHONPATH": str(Path(__file__).resolve().parents[2])},
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        start_new_session=True,
    )


@pytest.mark.timeout(180)
def test_up_starts_a_private_redis_runs_the_demo_and_exits(tmp_path: Path) -> None:
    redis_port = free_port()
    up = _up(tmp_path, redis_port, "--tools", "1", "--exit-after-demo")
    output, _ = up.communicate(timeout=150)
    assert up.returncode == 0, output[-4000:]
    assert f"started a private one at redis://127.0.0.1:{redis_port}/0" in output
    assert "final request of demo-" in output, output[-4000:]
    transcripts = list((tmp_path / "data" / "projects").rglob("demo-*.jsonl"))
    assert len(transcripts) == 1
    assert transcripts[0].read_text().count("\n") >= 5
    assert (tmp_path / "data" / "redis" / "redis.log").exists()  # --dir and --logfile resolved together
    assert not is_reachable(f"redis://127.0.0.1:{redis_port}/0")  # stopped with everything else


@pytest.mark.timeout(180)
def test_ctrl_c_stops_workers_before_the_private_redis(tmp_path: Path) -> None:
    redis_port = free_port()
    up = _up(tmp_path, redis_port, "--tools", "1", "--no-demo")
    assert up.stdout is not None
    lines: list[str] = []
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        line = up.stdout.readline()
        if not line:
            break
        lines.append(line)
        if "agentbus is up" in line:
            break
    assert any("agentbus is up" in line for line in lines), "".join(lines)[-4000:]
    os.killpg(up.pid, signal.SIGINT)  # what Ctrl-C in a terminal does: the whole foreground group
    rest, _ = up.communicate(timeout=90)
    output = "".join(lines) + rest
    assert up.returncode == 0, output[-4000:]
    assert "shutdown failed" not in output, output[-4000:]
    assert "redis_unavailable" not in output, output[-4000:]  # no worker outlived its Redis
    assert output.count("Application shutdown complete") == 4
    assert not is_reachable(f"redis://127.0.0.1:{redis_port}/0")
