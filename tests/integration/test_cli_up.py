"""``agentbus up``, the README's first command, on a machine where no Redis is configured or reachable: it
starts a private Redis (AOF, under the default relative data dir; on the port ``--redis-port`` names, so tests
never meet a Redis on 6379), supervised like a worker (issue 25: a SIGKILLed one is restarted on its
append-only file, one that keeps dying makes `up` exit 1 with one line), while a ``REDIS_URL`` the user set
is never replaced by a private one; every worker type as its own process, runs
the demo session (real tool calls, a transcript, API requests), and supervises what it started
(issue 16): a Ctrl-C or a closed terminal (SIGHUP) stops everything — workers first (graceful SIGTERM),
then the Redis they were writing to — and so does a SIGKILL of `up` itself (the kernel's parent-death
signal); a worker that dies is restarted, one that keeps dying makes `up` exit non-zero; readiness is
checked on ports `up` bound itself, so leftovers holding a port cannot fool it.

All through real processes: `up` as a subprocess, its workers, its private `redis-server`.
"""

from __future__ import annotations

import http.server
import json
import os
import signal
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import ClassVar

import orjson
import pytest
import redis

from agentbus_redis.confinement.workspaces import workspace_relative_dir
from agentbus_redis.local.redis_server import free_port, is_reachable
from agentbus_redis.session_ids import claude_session_id

pytestmark = [pytest.mark.integration, pytest.mark.slow]

REPO = Path(__file__).resolve().parents[2]


StartUp = Callable[..., "subprocess.Popen[str]"]


@pytest.fixture
def start_up(tmp_path: Path) -> Iterator[StartUp]:
    """Starts ``agentbus up --tools 1`` in ``tmp_path`` without REDIS_URL and with ``--redis-port`` a port
    nobody answers on (so it starts its private one there), or with ``redis_url`` set; any `up` still running
    at the end is stopped (SIGTERM: it stops what it started)."""
    started: list[subprocess.Popen[str]] = []

    def start(
        redis_port: int, *args: str, base_port: int | None = None, redis_url: str | None = None
    ) -> subprocess.Popen[str]:
        env = {
            **os.environ,
            "AGENTBUS_DATA_DIR": "data",  # the default, relative to where `up` runs
            "PYTHONPATH": str(REPO),
        }
        env.pop("REDIS_URL", None)
        env.pop("AGENTBUS_REDIS_URL", None)
        if redis_url is not None:
            env["REDIS_URL"] = redis_url
        env.pop("AGENTBUS_TOOLS__WORKSPACE", None)  # the default: under the data directory
        env.pop("ANTHROPIC_API_KEY", None)  # the demo's model is the fake server
        port = free_port() if base_port is None else base_port
        # With the signal dispositions a terminal gives its job: a runner started under `nohup` or as a background
        # job (`cmd &` ignores SIGINT) would hand its ignored SIGHUP or SIGINT down, and `up` rightly keeps an
        # ignored SIGHUP ignored (`nohup agentbus up`), so the hang-up test would wait for a stop that never comes.
        command = ["env", "--default-signal=HUP,INT", sys.executable, "-m", "agentbus_redis.cli.main", "up"]
        command += ["--tools", "1", "--base-port", str(port)]
        command += ["--redis-port", str(redis_port), *args]
        # Its own session, as a terminal's job is: the test delivers Ctrl-C to that whole process group.
        up = subprocess.Popen(
            command,
            cwd=tmp_path,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            start_new_session=True,
        )
        started.append(up)
        return up

    yield start
    for up in started:
        if up.poll() is None:
            up.terminate()
            try:
                up.communicate(timeout=60)
            except subprocess.TimeoutExpired:
                up.kill()
                up.communicate()


def _read_until(up: subprocess.Popen[str], marker: str, lines: list[str], timeout_s: float = 120) -> str:
    """Read `up`'s output into ``lines`` until a line contains ``marker``; returns that line."""
    assert up.stdout is not None
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        line = up.stdout.readline()
        if not line:
            break
        lines.append(line)
        if marker in line:
            return line
    pytest.fail(f"no {marker!r} in the output of up:\n" + "".join(lines)[-4000:])


def _pids(lines: list[str]) -> dict[str, int]:
    """Each worker's pid from `up`'s table (``tools-1        pid 1234    http://…``) and the private Redis'."""
    pids: dict[str, int] = {}
    for line in lines:
        fields = line.split()
        if len(fields) >= 3 and fields[1] == "pid":
            pids[fields[0]] = int(fields[2])
        if "started a private one at" in line:
            pids["redis"] = int(line.split("(pid ")[1].split(",")[0])
    return pids


def _running(pid: int) -> bool:
    """Whether ``pid`` runs (a zombie nobody reaped yet does not)."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def _wait_gone(pids: dict[str, int], timeout_s: float = 60) -> dict[str, int]:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        left = {name: pid for name, pid in pids.items() if _running(pid)}
        if not left:
            return {}
        time.sleep(0.1)
    return left


@pytest.mark.timeout(180)
def test_up_starts_a_private_redis_runs_the_demo_and_exits(tmp_path: Path, start_up: StartUp) -> None:
    redis_port = free_port()
    up = start_up(redis_port, "--exit-after-demo")
    output, _ = up.communicate(timeout=150)
    assert up.returncode == 0, output[-4000:]
    assert f"started a private one at redis://127.0.0.1:{redis_port}/0" in output
    assert "final request of demo-" in output, output[-4000:]
    # No API key: the fake model server played the model, called by the model worker (issue 18).
    assert "no ANTHROPIC_API_KEY: the model is the fake server at http://127.0.0.1:" in output
    assert "model calls" in output, output[-4000:]
    assert "model says:" in output
    assert "next: open a second terminal" not in output  # it stops by itself: nothing to chat with afterwards
    # Issue 26: the transcript is named by the session's Claude Code UUID.
    session = output.split("final request of ", 1)[1].split(":", 1)[0]
    transcripts = list((tmp_path / "data" / "projects").rglob("*.jsonl"))
    assert [path.name for path in transcripts] == [f"{claude_session_id(session)}.jsonl"], output[-4000:]
    assert transcripts[0].read_text().count("\n") >= 5
    assert f"transcript {transcripts[0]}" in output  # absolute
    # The demo's workspace: its session's own (issue 28), under the data dir.
    assert (tmp_path / "data" / "workspace" / workspace_relative_dir(session, "tree") / "NOTES.md").exists()
    assert not (tmp_path / "workspace").exists()
    assert (tmp_path / "data" / "redis" / "redis.log").exists()  # --dir and --logfile resolved together
    assert not is_reachable(f"redis://127.0.0.1:{redis_port}/0")  # stopped with everything else


@pytest.mark.timeout(180)
@pytest.mark.parametrize("stop_signal", [signal.SIGINT, signal.SIGHUP])
def test_ctrl_c_or_hangup_stops_every_child_workers_before_the_private_redis(
    start_up: StartUp, stop_signal: signal.Signals
) -> None:
    """SIGINT is Ctrl-C; SIGHUP is the terminal closing (it used to kill `up` alone, leaving 5 workers
    and Redis running)."""
    redis_port = free_port()
    up = start_up(redis_port, "--no-demo")
    lines: list[str] = []
    _read_until(up, "agentbus is up", lines)
    pids = _pids(lines)
    assert set(pids) == {
        "redis",
        "ingestion",
        "normalization",
        "transcripts",
        "tools-1",
        "model",
        "console",
        "fake-model",
    }, pids
    # Issue 30: the console serves with a token generated for this run, and refuses a request without it.
    (token_line,) = [line for line in lines if line.startswith("console token")]
    token = token_line.rsplit(": ", 1)[1].strip()
    (console_line,) = [line for line in lines if line.startswith("console ") and " pid " in line]
    console_url = console_line.split()[-1]
    with urllib.request.urlopen(
        urllib.request.Request(f"{console_url}api/me", headers={"Authorization": f"Bearer {token}"}), timeout=10
    ) as reply:
        assert json.loads(reply.read())["role"] == "operator"
    with pytest.raises(urllib.error.HTTPError, match="401"):
        urllib.request.urlopen(f"{console_url}api/me", timeout=10)
    # Issue 27: once ready, what to do next — the chat command (naming the Redis `up` chose, not the default
    # one `chat` finds by itself) and how to stop.
    hint = _read_until(up, "next:", lines)
    assert hint.strip() == (
        "next: open a second terminal here and run "
        f"`REDIS_URL=redis://127.0.0.1:{redis_port}/0 uv run agentbus chat my-session` to talk to the model; "
        "Ctrl-C here stops agentbus"
    )
    os.killpg(up.pid, stop_signal)  # what the terminal does: the whole foreground group
    rest, _ = up.communicate(timeout=90)
    output = "".join(lines) + rest
    assert up.returncode == 0, output[-4000:]
    assert "shutdown failed" not in output, output[-4000:]
    assert "redis_unavailable" not in output, output[-4000:]  # no worker outlived its Redis
    assert output.count("Application shutdown complete") == 6
    assert _wait_gone(pids, timeout_s=5) == {}
    assert not is_reachable(f"redis://127.0.0.1:{redis_port}/0")


@pytest.mark.timeout(180)
def test_a_sigkilled_up_takes_its_children_with_it(start_up: StartUp) -> None:
    """No clean-up runs in a SIGKILLed `up`: the kernel's parent-death signal (Linux) stops its children."""
    up = start_up(free_port(), "--no-demo")
    lines: list[str] = []
    _read_until(up, "agentbus is up", lines)
    pids = _pids(lines)
    up.kill()
    up.communicate(timeout=30)
    assert _wait_gone(pids) == {}


@pytest.mark.timeout(180)
def test_a_dead_worker_is_restarted_and_one_that_keeps_dying_fails_up(start_up: StartUp) -> None:
    up = start_up(free_port(), "--no-demo", "--max-restarts", "1")
    lines: list[str] = []
    _read_until(up, "agentbus is up", lines)
    pids = _pids(lines)
    os.kill(pids["tools-1"], signal.SIGKILL)
    restarted = _read_until(up, "worker tools-1 restarted", lines)
    new_pid = int(restarted.rsplit("pid ", 1)[1])
    assert new_pid != pids["tools-1"]
    _read_until(up, "worker tools-1 (pid", lines)  # ready again: /readyz on the same port
    os.kill(new_pid, signal.SIGKILL)  # a second failure in a row: more than --max-restarts 1
    rest, _ = up.communicate(timeout=90)
    output = "".join(lines) + rest
    assert up.returncode == 1, output[-4000:]
    assert "worker tools-1 died 2 times in a row (last exit code -9): giving up" in output
    assert _wait_gone(pids) == {}


class _Leftover(http.server.BaseHTTPRequestHandler):
    """A process still holding the port from an earlier run: answers 200 to everything."""

    requests: ClassVar[list[str]] = []

    def do_GET(self) -> None:
        self.requests.append(self.path)
        self.send_response(200)
        self.end_headers()

    def log_message(self, format: str, *args: object) -> None:
        pass


@pytest.fixture
def leftover_port() -> Iterator[int]:
    server = http.server.HTTPServer(("127.0.0.1", 0), _Leftover)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield server.server_address[1]
    finally:
        server.shutdown()
        server.server_close()


@pytest.mark.timeout(180)
def test_leftovers_on_a_port_do_not_fool_readiness_and_console_logs_stay_short(
    tmp_path: Path, start_up: StartUp, leftover_port: int
) -> None:
    """The first worker's port is held by something answering /readyz: `up` binds its own port instead and
    never asks the leftover. With --log-format console the terminal gets readable lines, the file all JSON."""
    _Leftover.requests.clear()
    args = ("--no-demo", "--exit-after-demo", "--log-format", "console")
    up = start_up(free_port(), *args, base_port=leftover_port)
    output, _ = up.communicate(timeout=150)
    assert up.returncode == 0, output[-4000:]
    assert f"port {leftover_port} on 127.0.0.1 is taken" in output, output[-4000:]
    assert _Leftover.requests == []
    assert "agentbus is up" in output
    assert not [line for line in output.splitlines() if line.startswith("{")], output[-4000:]
    assert output.count("worker_started") == 5, output[-4000:]
    log_file = tmp_path / "data" / "logs" / "up.log"
    assert f"worker logs: {log_file}" in output
    records = [orjson.loads(line) for line in log_file.read_bytes().splitlines()]
    assert {record["worker"] for record in records} == {
        "ingestion",
        "normalization",
        "transcripts",
        "tools",
        "model",
        "console",
        "fake-model",
    }
    assert sum(record["event"] == "Application shutdown complete." for record in records) == 6


def _metrics_ports(lines: list[str]) -> dict[str, int]:
    """Each child's HTTP port from `up`'s table (``tools-1        pid 1234    http://127.0.0.1:9401/metrics``)."""
    ports: dict[str, int] = {}
    for line in lines:
        fields = line.split()
        if len(fields) >= 4 and fields[1] == "pid" and fields[3].endswith("/metrics"):
            ports[fields[0]] = int(fields[3].rsplit(":", 1)[1].split("/")[0])
    return ports


def _ready(port: int) -> bool:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/readyz", timeout=2) as reply:
            return bool(reply.status == 200)
    except (urllib.error.URLError, OSError):
        return False


def _poll(check: Callable[[], bool], what: str, timeout_s: float = 90) -> None:
    """Until ``check()`` holds; a generous bound only, so a loaded machine does not fail the test."""
    deadline = time.monotonic() + timeout_s
    while not check():
        if time.monotonic() > deadline:
            pytest.fail(f"never happened: {what}")
        time.sleep(0.1)


@pytest.mark.timeout(240)
def test_a_killed_private_redis_is_restarted_on_its_append_only_file_and_one_that_keeps_dying_fails_up(
    tmp_path: Path, start_up: StartUp
) -> None:
    """Issue 25: `up` ran on, silent, with its Redis dead and every worker unready. Now the private Redis is a
    supervised child: SIGKILLed, it comes back on the same port and AOF (the data is still there, the
    workers ready again); when it cannot come back (its AOF manifest broken), `up` exits 1 with one line."""
    redis_port = free_port()
    url = f"redis://127.0.0.1:{redis_port}/0"
    up = start_up(redis_port, "--no-demo", "--max-restarts", "2")
    lines: list[str] = []
    _read_until(up, "agentbus is up", lines)
    pids = _pids(lines)
    ports = _metrics_ports(lines)
    with redis.Redis.from_url(url) as client:
        client.set("written-before-the-kill", "still here")

    os.kill(pids["redis"], signal.SIGKILL)
    restarted = _read_until(up, "the private Redis restarted", lines)
    assert f"pid {pids['redis']}" not in restarted
    with redis.Redis.from_url(url) as client:
        assert client.get("written-before-the-kill") == b"still here"
        assert client.exists("agentbus:tools:catalog")  # what the workers wrote: the append-only file replayed
    _poll(lambda: all(_ready(port) for port in ports.values()), "every worker ready again on the restarted Redis")

    new_pid = int(restarted.split("pid ")[1].split(",")[0])
    manifest = next((tmp_path / "data" / "redis").rglob("*.manifest"))
    manifest.write_text("this is not an AOF manifest\n")  # read only when redis-server starts: every restart fails
    os.kill(new_pid, signal.SIGKILL)
    rest, _ = up.communicate(timeout=150)
    output = "".join(lines) + rest
    assert up.returncode == 1, output[-4000:]
    failures = [line for line in output.splitlines() if line.startswith("agentbus up:")]
    assert len(failures) == 1, output[-4000:]
    assert "the private Redis at" in failures[0]
    assert failures[0].endswith("giving up")
    tracebacks = [(line[:200], line[-1500:]) for line in output.splitlines() if "Traceback" in line]
    assert not tracebacks
    assert _wait_gone(pids) == {}


@pytest.mark.timeout(120)
def test_an_unreachable_redis_url_is_never_replaced_by_a_private_redis(tmp_path: Path, start_up: StartUp) -> None:
    """Issue 25: a mistyped REDIS_URL used to be replaced silently by a throwaway private Redis (and `up`
    exited 0). Now `up` waits for it (``--redis-wait``), then exits 1 with one line and starts nothing."""
    port = free_port()
    up = start_up(free_port(), "--no-demo", "--redis-wait", "1", redis_url=f"redis://:hunter2@127.0.0.1:{port}/0")
    output, _ = up.communicate(timeout=90)
    assert up.returncode == 1, output
    failures = [line for line in output.splitlines() if line.startswith("agentbus up:")]
    assert len(failures) == 1, output
    assert f"the Redis at redis://:***@127.0.0.1:{port}/0 (REDIS_URL) did not answer within 1s" in failures[0]
    assert "hunter2" not in output
    assert "private one at" not in output
    assert not (tmp_path / "data" / "redis").exists()
    assert "Traceback" not in output
