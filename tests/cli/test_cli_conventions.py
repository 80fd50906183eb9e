"""Issue 16, "CLI conventions": ``--version`` with the commit, ``-h``, the environment variable behind each
option in the help, a root that imports no command it does not run, and ``worker`` saying which port it
picked."""

from __future__ import annotations

import json
import re
import signal
import socket
import subprocess
import urllib.request
from pathlib import Path

import pytest
import redis.asyncio as aioredis

from agentbus_redis.cli.main import COMMANDS
from agentbus_redis.config.settings import Settings
from agentbus_redis.streams.topology import Topology
from tests.cli.process import AGENTBUS, REPO_ROOT, agentbus, cli_env

TOPOLOGY = Topology(Settings(_env_file=None).names)


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


def imported_modules(args: list[str], *, cwd: Path, env: dict[str, str]) -> set[str]:
    """Every module ``agentbus ARGS`` imports (``-X importtime`` lists each one on stderr)."""
    done = subprocess.run(
        [*AGENTBUS[:1], "-X", "importtime", *AGENTBUS[1:], *args],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    return {line.split("|")[-1].strip() for line in done.stderr.splitlines() if line.startswith("import time")}


OPERATIONS_ONLY = {
    "structlog",
    "rich",
    "pygments",
    "faststream",
    "uvicorn",
    "starlette",
    "anthropic",
    "httpx",
    "prometheus_client",
    "msgpack",
    "agentbus_redis.workers.registry",
    "agentbus_redis.runtime.consumer",
    "agentbus_redis.observability.logging",
}
"""What only a worker (or the model worker's API client, or its metrics) needs: no CLI command that reads or
writes Redis loads it (issue 27, "Fast commands": structlog alone pulled in rich and pygments)."""


@pytest.mark.parametrize(
    "args",
    [["--help"], ["transcript", "--help"], ["normalize", "--help"], ["dlq", "ls", "--help"]],
    ids=" ".join,
)
def test_help_imports_no_bus_client_nor_rich(args: list[str], tmp_path: Path) -> None:
    """The start-up cost that made every call take 1.5–2 s: importing redis, the SDK and the workers
    (and typer's rich help) before parsing the arguments."""
    imported = imported_modules(args, cwd=tmp_path, env=cli_env())
    heavy = {"redis", "agentbus_redis.sdk.client", "pydantic_settings", *OPERATIONS_ONLY}
    assert not heavy & imported


def test_normalize_imports_no_bus_client(tmp_path: Path) -> None:
    """``normalize`` reads a file: neither Redis nor the settings nor the SDK (issue 27)."""
    transcript = tmp_path / "t.jsonl"
    prompt = {
        "type": "user",
        "uuid": "00000000-0000-4000-8000-000000000001",
        "parentUuid": None,
        "sessionId": "11111111-1111-4111-8111-111111111111",
        "timestamp": "2026-01-01T00:00:00.000Z",
        "message": {"role": "user", "content": "hi"},
    }
    transcript.write_text(json.dumps(prompt) + "\n")
    imported = imported_modules(["normalize", str(transcript)], cwd=tmp_path, env=cli_env())
    assert "agentbus_redis.normalize" in imported
    heavy = {"redis", "agentbus_redis.sdk.client", "pydantic_settings", *OPERATIONS_ONLY}
    assert not heavy & imported


EVENT_MODELS = {"agentbus_redis.bus.events", "agentbus_redis.messages.kinds", "agentbus_redis.sdk.conversation"}
"""The bus' pydantic models: built by a command that writes or reads events, not by one that lists tools."""


@pytest.mark.parametrize(
    ("args", "also_absent"),
    [
        (["tools", "ls"], {*EVENT_MODELS, "tree_sitter"}),
        (["usage", "quiet"], {*EVENT_MODELS, "tree_sitter"}),
        (["tail", "quiet"], {"agentbus_redis.bus.ledger", "agentbus_redis.bus.internal_events", "tree_sitter"}),
        (["send", "quiet", "hi"], {"agentbus_redis.bus.ledger", "agentbus_redis.bus.internal_events", "tree_sitter"}),
    ],
    ids=lambda value: " ".join(value) if isinstance(value, list) else "",
)
async def test_a_redis_command_imports_only_what_it_uses(
    args: list[str], also_absent: set[str], redis_url: str, aredis: aioredis.Redis, tmp_path: Path
) -> None:
    """Issue 27: a CLI command that talks to Redis took ~1.3 s, 0.85 s of it importing the whole SDK. It
    imports the client and the models it uses, never what only a worker needs."""
    await aredis.zadd(TOPOLOGY.sessions(TOPOLOGY.names.shard_of("quiet")), {"quiet": 1})
    imported = imported_modules(args, cwd=tmp_path, env=cli_env(redis_url))
    assert {"redis", "agentbus_redis.sdk.client"} <= imported  # it did talk to Redis
    assert not (OPERATIONS_ONLY | also_absent) & imported


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
