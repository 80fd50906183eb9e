"""Issue 28, the escape suite: every case is a real command run through the bus — a real Redis, every worker
its own process, the fake model issuing the Bash (and file tool) calls — against a tool worker with
per-session workspaces and the bubblewrap sandbox on. Each case is refused or contained; after the
dangerous ones the tool worker is still the same live process and another session's tools still run.

The deployment runs in ``bypassPermissions`` mode, so every Bash command runs: the permission rules are the
first wall, the sandbox the second, and it is the second one under test here (the rules would already stop
e.g. a redirection to a path outside the workspace). One case checks a deny rule still answers first.
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import socket
import threading
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlparse

import pytest
import redis

from agentbus_redis.bus.events import LogEntry
from agentbus_redis.json_types import JsonObject
from agentbus_redis.messages.constants import REJECT_MESSAGE
from agentbus_redis.messages.content import ToolResultBlock
from agentbus_redis.messages.kinds import UserMessage
from tests.integration.cluster import WorkerCluster
from tests.integration.fake_model import FakeModelProcess
from tests.integration.model_turns import live_messages, reply, text, tool_use, turn_ended, wait_for

pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.timeout(600)]

API_KEY = f"sk-ant-escape-{uuid.uuid4().hex}"
FILE_SIZE_MB = 4
ALLOW = ["Read", "Glob", "Grep", "Write", "Edit", "Bash"]
DENY = ["Bash(curl:*)"]


@pytest.fixture(scope="module")
def deployment(module_cluster: WorkerCluster, fake: FakeModelProcess) -> WorkerCluster:
    module_cluster.forked = False  # /proc/<worker pid>/environ must be the worker's own (it holds the secrets)
    module_cluster.extra_env.update(
        {
            "ANTHROPIC_API_KEY": API_KEY,
            "AGENTBUS_MODEL__BASE_URL": fake.base_url,
            "AGENTBUS_TOOLS__WORKSPACE_SCOPE": "session",
            "AGENTBUS_TOOLS__PERMISSION_MODE": "bypassPermissions",
            "AGENTBUS_TOOLS__ALLOW": json.dumps(ALLOW),
            "AGENTBUS_TOOLS__DENY": json.dumps(DENY),
            "AGENTBUS_TOOLS__TIMEOUT_S": "60",
            "AGENTBUS_TOOLS__DEADLINE_S": "120",
            "AGENTBUS_TOOLS__SANDBOX_PROCESSES": "64",
            "AGENTBUS_TOOLS__SANDBOX_MEMORY_MB": "256",
            "AGENTBUS_TOOLS__SANDBOX_FILE_SIZE_MB": str(FILE_SIZE_MB),
            "AGENTBUS_TOOLS__SANDBOX_TMP_MB": "8",
            "AGENTBUS_TOOLS__SANDBOX_CPU_S": "20",
        }
    )
    for name in ("ingestion", "normalization", "transcripts", "tools", "model"):
        module_cluster.start(name)
    module_cluster.wait_ready(timeout_s=240)
    return module_cluster


@dataclass(frozen=True)
class Result:
    text: str
    is_error: bool


def new_session() -> str:
    return f"escape-{uuid.uuid4().hex[:12]}"


def call_id() -> str:
    return f"toolu_{uuid.uuid4().hex[:16]}"


def bash_call(command: str, *, timeout_ms: int = 30_000) -> JsonObject:
    return tool_use(call_id(), "Bash", command=command, timeout=timeout_ms)


def result_blocks(history: list[LogEntry]) -> dict[str, ToolResultBlock]:
    return {
        block.tool_use_id: block
        for message in live_messages(history)
        if isinstance(message, UserMessage)
        for block in message.blocks
        if isinstance(block, ToolResultBlock)
    }


def answered(history: list[LogEntry]) -> set[str]:
    return set(result_blocks(history))


async def turn(cluster: WorkerCluster, fake: FakeModelProcess, calls: list[JsonObject], session: str) -> list[Result]:
    """One turn of ``session`` in which the model makes ``calls`` (one reply); their results, in call order.
    Every turn must end: a command that hangs the bus fails the test with the session's log."""
    fake.script(session, [reply(*calls), reply(text("done"))])
    async with cluster.client() as client:
        await client.send_prompt(session, "go")
        history = await wait_for(
            client, session, lambda h: turn_ended(h) and answered(h) >= {str(c["id"]) for c in calls}, timeout_s=240
        )
    blocks = result_blocks(history)
    results = []
    for call in calls:
        block = blocks[str(call["id"])]
        content = block.content if isinstance(block.content, str) else json.dumps(block.content)
        results.append(Result(content or "", bool(block.is_error)))
    # The permission rules stopping a command (they would ask about e.g. a redirection outside the workspace)
    # would make a case prove nothing about the sandbox.
    assert all(result.text != REJECT_MESSAGE for result in results), results
    return results


async def bash(
    cluster: WorkerCluster,
    fake: FakeModelProcess,
    command: str,
    *,
    session: str | None = None,
    timeout_ms: int = 30_000,
) -> Result:
    [result] = await turn(cluster, fake, [bash_call(command, timeout_ms=timeout_ms)], session or new_session())
    return result


def tools_worker_pid(cluster: WorkerCluster) -> int:
    [worker] = cluster.of("tools")
    return worker.process.pid


def secrets_of(cluster: WorkerCluster) -> list[str]:
    """What must never show in a command's output: the worker's secrets and Redis address."""
    return [cluster.internal_key, API_KEY, cluster.redis_url]


async def assert_healthy(cluster: WorkerCluster, fake: FakeModelProcess, pid: int) -> None:
    """The same tool worker process is alive and healthy, and a new session's Bash runs."""
    [worker] = cluster.of("tools")
    assert worker.process.pid == pid
    assert worker.process.poll() is None, cluster.logs()[-3000:]
    with urllib.request.urlopen(f"http://127.0.0.1:{worker.port}/healthz", timeout=10) as answer:
        assert answer.status == 200
    token = uuid.uuid4().hex
    result = await bash(cluster, fake, f"echo alive-{token}")
    assert result == Result(f"alive-{token}", False)


def processes_with(token: str) -> list[int]:
    """Live processes of this machine whose command line holds ``token``."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes()
            state = (entry / "stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if token.encode() in cmdline and state not in ("Z", "X"):
            found.append(int(entry.name))
    return found


async def none_left(token: str) -> bool:
    for _ in range(500):
        if not processes_with(token):
            return True
        await asyncio.sleep(0.02)
    return False


@pytest.fixture
def listener() -> Iterator[tuple[int, list[str]]]:
    """A TCP server on loopback that records every connection it accepts."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen()
    accepted: list[str] = []

    def serve() -> None:
        while True:
            try:
                connection, peer = server.accept()
            except OSError:
                return
            accepted.append(f"{peer}")
            connection.close()

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    try:
        yield server.getsockname()[1], accepted
    finally:
        server.close()
        thread.join(timeout=5)


async def test_the_workers_environment_is_out_of_reach(deployment: WorkerCluster, fake: FakeModelProcess) -> None:
    pid = tools_worker_pid(deployment)
    assert deployment.internal_key.encode() in Path(f"/proc/{pid}/environ").read_bytes()  # the right process
    command = (
        f"env; cat /proc/self/environ; cat /proc/{pid}/environ; cat /proc/{pid}/cmdline; cat /proc/1/environ; "
        "for p in /proc/[0-9]*; do echo $p; tr '\\0' ' ' < $p/environ; tr '\\0' ' ' < $p/cmdline; echo; done"
    )
    result = await bash(deployment, fake, command)
    assert "HOME=" in result.text
    assert "PATH=" in result.text
    for secret in secrets_of(deployment):
        assert secret not in result.text
    assert "AGENTBUS_" not in result.text
    assert "REDIS_URL" not in result.text
    assert "ANTHROPIC" not in result.text
    await assert_healthy(deployment, fake, pid)


async def test_redis_other_loopback_services_and_the_outside_are_unreachable(
    deployment: WorkerCluster, fake: FakeModelProcess, listener: tuple[int, list[str]]
) -> None:
    pid = tools_worker_pid(deployment)
    port, accepted = listener
    redis_url = urlparse(deployment.redis_url)
    fake_url = urlparse(fake.base_url)
    canary = f"escape:canary:{uuid.uuid4().hex}"
    client = redis.Redis.from_url(deployment.redis_url)
    client.set(canary, "still here")
    targets = [
        (redis_url.hostname, redis_url.port),
        ("localhost", redis_url.port),
        (fake_url.hostname, fake_url.port),
        ("127.0.0.1", port),
        ("1.1.1.1", 80),
        ("8.8.8.8", 53),
    ]
    probes = "; ".join(
        f"if timeout 5 bash -c 'exec 3<>/dev/tcp/{host}/{target_port}' 2>/dev/null; "
        f"then echo OPEN {host}:{target_port}; else echo closed {host}:{target_port}; fi"
        for host, target_port in targets
    )
    flush = f"printf 'FLUSHALL\\r\\n' > /dev/tcp/127.0.0.1/{redis_url.port}"
    # A script, so the permission rules (which would stop the redirections to /dev/tcp) see only `./probe.sh`.
    script = f"#!/bin/bash\n{probes}\n{flush}\ncat /proc/net/dev\n"
    [written, result] = await turn(
        deployment,
        fake,
        [
            tool_use(call_id(), "Write", file_path="probe.sh", content=script),
            bash_call("chmod +x probe.sh && ./probe.sh"),
        ],
        new_session(),
    )
    assert not written.is_error, written
    assert "OPEN" not in result.text
    assert result.text.count("closed") == len(targets)
    assert accepted == []
    assert client.get(canary) == b"still here"
    client.close()
    await assert_healthy(deployment, fake, pid)


async def test_another_sessions_workspace_and_paths_outside_are_out_of_reach(
    deployment: WorkerCluster, fake: FakeModelProcess
) -> None:
    pid = tools_worker_pid(deployment)
    secret = f"secret-{uuid.uuid4().hex}"
    owner, intruder = new_session(), new_session()
    [written, where] = await turn(
        deployment,
        fake,
        [tool_use(call_id(), "Write", file_path="secret.txt", content=secret), bash_call("pwd")],
        owner,
    )
    assert not written.is_error, written
    theirs = Path(where.text)
    root = deployment.workspace.resolve()
    assert theirs == root / "sessions" / owner
    assert (theirs / "secret.txt").read_text() == secret
    outside = deployment.root / "outside.txt"
    outside.write_text(secret)
    command = "; ".join(
        [
            f"cat {theirs}/secret.txt",
            f"cat ../{owner}/secret.txt",
            f"ls -la {root} {root}/sessions ..",
            f"cat {outside}",
            f"ls {deployment.data_dir} {deployment.root}",
            f"echo pwned > {theirs}/planted",
            f"echo pwned > ../{owner}/planted",
            f"ln -s {theirs}/secret.txt link; cat link",
            f"ln -s {outside} link_out; cat link_out",
            f"ln {theirs}/secret.txt hard; ln {outside} hard_out; ln /etc/hostname hard_etc",
            "echo pwned > /usr/pwned; echo pwned > /etc/pwned",
            f"echo pwned > {root}/pwned",
            "ls -la",
        ]
    )
    [shell, *file_tools] = await turn(
        deployment,
        fake,
        [
            bash_call(command),
            tool_use(call_id(), "Read", file_path=f"{theirs}/secret.txt"),
            tool_use(call_id(), "Read", file_path=f"../{owner}/secret.txt"),
            tool_use(call_id(), "Read", file_path=str(outside)),
            tool_use(call_id(), "Glob", pattern="*", path=str(root / "sessions")),
            tool_use(call_id(), "Grep", pattern="secret", path=str(root)),
            tool_use(call_id(), "Write", file_path=f"{theirs}/planted.txt", content="pwned"),
        ],
        intruder,
    )
    assert secret not in shell.text
    for result in file_tools:
        assert result.is_error, result
        assert secret not in result.text
        assert "outside the workspace" in result.text
    # The links the command planted lead nowhere for the file tools either.
    links = await turn(
        deployment,
        fake,
        [tool_use(call_id(), "Read", file_path=name) for name in ("link", "link_out")],
        intruder,
    )
    for result in links:
        assert result.is_error, result
        assert secret not in result.text
    mine = root / "sessions" / intruder
    assert sorted(path.name for path in theirs.iterdir()) == ["secret.txt"]
    assert (theirs / "secret.txt").read_text() == secret
    assert not (mine / "hard").exists()
    assert not (mine / "hard_out").exists()
    assert not (mine / "hard_etc").exists()
    assert not Path("/usr/pwned").exists()
    assert not Path("/etc/pwned").exists()
    assert not (root / "pwned").exists()
    await assert_healthy(deployment, fake, pid)


async def test_a_deny_rule_answers_before_the_sandbox(deployment: WorkerCluster, fake: FakeModelProcess) -> None:
    result = await bash(deployment, fake, "curl http://example.com")
    assert result.is_error
    assert "Permission to use Bash with command curl http://example.com has been denied" in result.text


async def test_a_fork_bomb_is_contained_and_other_sessions_run_meanwhile(
    deployment: WorkerCluster, fake: FakeModelProcess
) -> None:
    pid = tools_worker_pid(deployment)
    marker = f"bomb-{uuid.uuid4().hex}"
    bomb = asyncio.create_task(
        bash(deployment, fake, f"# {marker}\nbomb() {{ bomb | bomb & }}; bomb; sleep 5", timeout_ms=8000)
    )
    await asyncio.sleep(1.0)  # let it spread
    token = uuid.uuid4().hex
    during = await bash(deployment, fake, f"echo beside-{token}; ( sleep 0.1 & wait ); echo forked")
    assert during == Result(f"beside-{token}\nforked", False)
    await bomb  # the bomb's turn ends
    assert await none_left(marker), processes_with(marker)
    await assert_healthy(deployment, fake, pid)


@pytest.mark.skipif(shutil.which("python3", path="/usr/bin:/bin") is None, reason="no system python3 to allocate with")
async def test_a_memory_hog_is_limited(deployment: WorkerCluster, fake: FakeModelProcess) -> None:
    pid = tools_worker_pid(deployment)
    result = await bash(deployment, fake, "python3 -c 'b = bytearray(2 * 1024**3); print(len(b))'")
    assert result.is_error
    assert "MemoryError" in result.text
    await assert_healthy(deployment, fake, pid)


async def test_a_disk_filler_is_limited(deployment: WorkerCluster, fake: FakeModelProcess) -> None:
    pid = tools_worker_pid(deployment)
    session = new_session()
    result = await bash(
        deployment,
        fake,
        "head -c 64M /dev/zero > big; ls -l big; head -c 64M /dev/zero > /tmp/big; ls -l /tmp/big; "
        "for i in 1 2 3 4; do head -c 3M /dev/zero > /tmp/f$i; done; df -k /tmp",
        session=session,
    )
    assert "File size limit exceeded" in result.text
    big = deployment.workspace.resolve() / "sessions" / session / "big"
    assert big.stat().st_size <= FILE_SIZE_MB * 1024 * 1024
    assert "No space left on device" in result.text  # the private /tmp is bounded (8 MB)
    await assert_healthy(deployment, fake, pid)


async def test_no_process_outlives_its_call(deployment: WorkerCluster, fake: FakeModelProcess) -> None:
    pid = tools_worker_pid(deployment)
    marker = f"{uuid.uuid4().int % 10**9:09d}"
    command = (
        f"sleep 300.{marker} & disown; nohup sleep 301.{marker} > /dev/null 2>&1 & "
        f"setsid sleep 302.{marker} > /dev/null 2>&1 < /dev/null & "
        f"(trap '' HUP TERM; exec sleep 303.{marker}) > /dev/null 2>&1 & echo started"
    )
    result = await bash(deployment, fake, command)
    assert result == Result("started", False)
    assert await none_left(marker), processes_with(marker)
    await assert_healthy(deployment, fake, pid)


async def test_signals_cannot_reach_the_worker(deployment: WorkerCluster, fake: FakeModelProcess) -> None:
    pid = tools_worker_pid(deployment)
    command = f"kill -TERM {pid}; kill -KILL {pid}; pkill -9 -f agentbus; kill -KILL -1; echo sent"
    await bash(deployment, fake, command)  # its own shell may be among what it killed: the result may say so
    await assert_healthy(deployment, fake, pid)


async def test_no_descriptor_is_inherited(deployment: WorkerCluster, fake: FakeModelProcess) -> None:
    """Not the worker's Redis connections (uvloop lets a child inherit descriptors: see bash.py)."""
    result = await bash(deployment, fake, "ls /proc/self/fd")
    assert sorted(result.text.split()) == ["0", "1", "2", "3"]  # stdio and ls's own listing of the directory


async def test_sandbox_state_shows_in_readyz(deployment: WorkerCluster) -> None:
    [worker] = deployment.of("tools")
    with urllib.request.urlopen(f"http://127.0.0.1:{worker.port}/readyz", timeout=10) as answer:
        checks = json.loads(answer.read())["checks"]
    assert checks["sandbox"]["ok"] is True
    assert checks["sandbox"]["detail"].startswith("on: bubblewrap ")


def test_off_is_stated_and_a_broken_sandbox_refuses_to_start(
    deployment: WorkerCluster, tmp_path_factory: pytest.TempPathFactory
) -> None:
    off = WorkerCluster(
        redis_url=deployment.redis_url,
        root=tmp_path_factory.mktemp("off"),
        extra_env={**deployment.extra_env, "AGENTBUS_TOOLS__SANDBOX": "off"},
        internal_key=deployment.internal_key,
    )
    broken = WorkerCluster(
        redis_url=deployment.redis_url,
        root=tmp_path_factory.mktemp("broken"),
        extra_env={**deployment.extra_env, "AGENTBUS_TOOLS__SANDBOX_BWRAP": "/bin/false", "LOG_LEVEL": "INFO"},
        internal_key=deployment.internal_key,
    )
    try:
        [unsandboxed] = off.start("tools")
        [refusing] = broken.start("tools")
        off.wait_ready()
        with urllib.request.urlopen(f"http://127.0.0.1:{unsandboxed.port}/readyz", timeout=10) as answer:
            checks = json.loads(answer.read())["checks"]
        assert checks["sandbox"]["detail"].startswith("OFF (AGENTBUS_TOOLS__SANDBOX=off)")
        assert "sandbox_off" in unsandboxed.log_path.read_text()
        for _ in range(2400):  # the refusal is logged once the worker reaches Redis
            if "cannot build a sandbox here" in refusing.log_path.read_text(errors="replace"):
                break
            assert refusing.process.poll() is None or "cannot build" in refusing.log_path.read_text()
            threading.Event().wait(0.05)
        log = refusing.log_path.read_text(errors="replace")
        assert "cannot build a sandbox here" in log, log[-3000:]
        with pytest.raises(urllib.error.HTTPError, match="503"):  # never ready
            urllib.request.urlopen(f"http://127.0.0.1:{refusing.port}/readyz", timeout=10)
    finally:
        off.stop()
        broken.stop()
    assert os.path.isdir(deployment.workspace)
