"""Issue 16, "CLI conventions": ``--version`` with the commit, ``-h``, the environment variable behind each
option in the help, a root that imports no command it does not run, and ``worker`` saying which port it
picked."""

from __future__ import annotations

import re
import signal
import socket
import subprocess
import urllib.request
from pathlib import Path

import pytest

from agentbus_redis.cli.main import COMMANDS
from tests.cli.process import AGENTBUS, REPO_ROOT, agentbus, cli_env


def test_version_names_the_commit(tmp_path: Path) -> None:
    outcome = agentbus("--version", cwd=tmp_path, env=cli_env())
    assert outcome.code == 0, outcome.stderr
    described = subprocess.run(
        ["git", "-C", str(REPO_ROOT), "describe", "--always", "--dirty", "--abbrev=12"],
        capture_output=True,
        text=True,
        check=False,
    ).stdout.strip()
    assert re.fullmatch(r"agentbus \S+ \(commit (\S+)\) \S+ \S+ on \S+\n", outcome.stdout)
    assert f"(commit {described or 'unknown'})" in outcome.stdout


def test_version_prefers_the_baked_in_commit(tmp_path: Path) -> None:
    """What the Docker image does: the build arg AGENTBUS_BUILD_COMMIT becomes the variable (no .git)."""
    outcome = agentbus("--version", cwd=tmp_path, env=cli_env(AGENTBUS_BUILD_COMMIT="0123456789ab"))
    assert "(commit 0123456789ab)" in outcome.stdout


def test_dash_h_is_help_at_every_level(tmp_path: Path) -> None:
    env = cli_env()
    root = agentbus("-h", cwd=tmp_path, env=env)
    assert root.code == 0
    assert root.stdout == agentbus("--help", cwd=tmp_path, env=env).stdout
    for name, spec in COMMANDS.items():
        assert re.search(rf"^  {name}\s+{re.escape(spec.summary[:30])}", root.stdout, re.MULTILINE), name
    for option, variables in {
        "--redis-url": "REDIS_URL, AGENTBUS_REDIS_URL",
        "--log-level": "LOG_LEVEL, AGENTBUS_LOG_LEVEL",
        "--debug": "AGENTBUS_DEBUG",
    }.items():
        described = root.stdout.split(option, 1)[1].split("\n  -", 1)[0]
        assert f"[env var: {variables}]" in " ".join(described.split()), option
    worker = agentbus("worker", "-h", cwd=tmp_path, env=env)
    assert worker.code == 0
    assert "[env var: AGENTBUS_HTTP_PORT]" in " ".join(worker.stdout.split())
    dlq_show = agentbus("dlq", "show", "-h", cwd=tmp_path, env=env)
    assert dlq_show.code == 0
    assert "Show one dead letter" in dlq_show.stdout


@pytest.mark.parametrize(
    "args",
    [["--help"], ["transcript", "--help"], ["normalize", "--help"], ["dlq", "ls", "--help"]],
    ids=" ".join,
)
def test_help_imports_no_bus_client_nor_rich(args: list[str], tmp_path: Path) -> None:
    """The start-up cost that made every call take 1.5–2 s: importing redis, the SDK and the workers
    (and typer's rich help) before parsing the arguments. ``-X importtime`` lists every module imported."""
    done = subprocess.run(
        [*AGENTBUS[:1], "-X", "importtime", *AGENTBUS[1:], *args],
        cwd=tmp_path,
        env=cli_env(),
        capture_output=True,
        text=True,
        check=True,
    )
    imported = {line.split("|")[-1].strip() for line in done.stderr.splitlines() if line.startswith("import time")}
    heavy = {
        "redis",
        "rich",
        "agentbus_redis.sdk.client",
        "agentbus_redis.workers.registry",
        "uvicorn",
        "faststream",
        "structlog",
    }
    assert not heavy & imported


def test_worker_without_port_prints_the_port_it_picked(redis_url: str, tmp_path: Path) -> None:
    env = cli_env(
        redis_url,
        LOG_LEVEL="WARNING",
        AGENTBUS_TOOLS__WORKSPACE=str(tmp_path / "workspace"),
        AGENTBUS_INTERNAL_KEY="test-key",
    )
    worker = subprocess.Popen(
        [*AGENTBUS, "worker", "ingestion"],
        cwd=tmp_path,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        assert worker.stderr is not None
        first = worker.stderr.readline()
        found = re.fullmatch(
            r"agentbus: worker ingestion: /metrics, /healthz, /readyz on http://127\.0\.0\.1:(\d+)\s", first
        )
        assert found, first
        with urllib.request.urlopen(f"http://127.0.0.1:{found.group(1)}/healthz", timeout=30) as reply:
            assert reply.status == 200
    finally:
        worker.terminate()
        worker.wait(timeout=30)
    assert worker.returncode in {0, -signal.SIGTERM}  # uvicorn re-raises the signal after its graceful stop


def test_a_taken_port_is_one_line(redis_url: str, tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("0.0.0.0", 0))
        taken.listen()
        port = taken.getsockname()[1]
        env = cli_env(redis_url, AGENTBUS_INTERNAL_KEY="test-key")
        outcome = agentbus("worker", "ingestion", "--port", str(port), cwd=tmp_path, env=env)
    assert outcome.code == 1
    assert outcome.error_line == f"agentbus: cannot listen on 127.0.0.1:{port}: Address already in use"


def test_a_signing_worker_without_its_key_is_one_line(redis_url: str, tmp_path: Path) -> None:
    """Issue 15/16: ingestion refuses to start without AGENTBUS_INTERNAL_KEY, in one line, exit 1."""
    outcome = agentbus("worker", "ingestion", "--port", "0", cwd=tmp_path, env=cli_env(redis_url))
    assert outcome.code == 1
    assert outcome.error_line.startswith("agentbus: AGENTBUS_INTERNAL_KEY is not set")
