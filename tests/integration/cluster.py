"""A real agentbus deployment for tests: every worker is its own OS process (``agentbus worker NAME``)
against the test session's private Redis, with short timeouts so failure paths finish quickly."""

from __future__ import annotations

import asyncio
import json
import os
import secrets
import signal
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from agentbus_redis.sdk.client import AgentbusClient
from agentbus_redis.streams.names import StreamNames
from agentbus_redis.workers.registry import bind_http_port
from tests.integration.forked import WorkerProcess, start_command, start_interpreter

TEST_SHARDS = 4
STOP_GRACE_S = 8.0
TEST_ALLOW_RULES = ["Read", "Glob", "Grep", "Write", "Edit", "Bash(ls:*)", "Bash(sleep:*)", "Bash(echo:*)"]


@dataclass
class Worker:
    name: str
    process: WorkerProcess
    port: int
    log_path: Path


@dataclass
class WorkerCluster:
    """Worker processes of one test; ``stop()`` ends them all."""

    redis_url: str
    root: Path
    extra_env: dict[str, str] = field(default_factory=dict)
    workers: list[Worker] = field(default_factory=list)
    internal_key: str = field(default_factory=lambda: secrets.token_hex(32))
    """The workers' secret for internal events (AGENTBUS_INTERNAL_KEY); producers do not have it."""
    forked: bool = True
    """Workers forked from the forkserver (``tests/integration/forked.py``: ~0.2 s of CPU to start instead of
    ~1.1 s); False for a test about what the worker process exposes to the kernel (``/proc/PID/environ``)."""

    @property
    def data_dir(self) -> Path:
        return self.root / "data"

    @property
    def workspace(self) -> Path:
        return self.root / "workspace"

    @property
    def cwd(self) -> str:
        """The sessions' working directory (AGENTBUS_CWD): its workspace, where the tools run."""
        return str(self.workspace)

    @property
    def names(self) -> StreamNames:
        return StreamNames(prefix="agentbus:", shards=TEST_SHARDS)

    def env(self) -> dict[str, str]:
        return {
            **os.environ,
            "REDIS_URL": self.redis_url,
            "AGENTBUS_DATA_DIR": str(self.data_dir),
            "AGENTBUS_TOOLS__WORKSPACE": str(self.workspace),
            "AGENTBUS_CWD": self.cwd,
            "AGENTBUS_SHARDS": str(TEST_SHARDS),
            "AGENTBUS_CONSUMER__CLAIM_MIN_IDLE_MS": "1500",
            "AGENTBUS_CONSUMER__CLAIM_INTERVAL_S": "0.5",
            "AGENTBUS_CONSUMER__MAX_DELIVERIES": "4",
            "AGENTBUS_LANE__LEASE_TTL_MS": "2000",
            "AGENTBUS_LANE__RENEW_INTERVAL_MS": "300",
            "AGENTBUS_TOOLS__TIMEOUT_S": "2",
            "AGENTBUS_TOOLS__DEADLINE_S": "30",
            "AGENTBUS_TOOLS__ALLOW": json.dumps(TEST_ALLOW_RULES),
            "AGENTBUS_FSYNC_INTERVAL_MS": "2",
            "LOG_LEVEL": "WARNING",
            "AGENTBUS_INTERNAL_KEY": self.internal_key,
            # The tests put files in the tools root for their sessions to find: every session works there (the
            # per-session workspaces are tested in test_sandbox_escapes.py).
            "AGENTBUS_TOOLS__WORKSPACE_SCOPE": "shared",
            **self.extra_env,
        }

    def start(
        self, name: str, count: int = 1, *, args: Sequence[str] = (), env: Mapping[str, str] | None = None
    ) -> list[Worker]:
        """``count`` processes of ``agentbus worker NAME ARGS…``, ``env`` on top of the cluster's environment."""
        self.workspace.mkdir(parents=True, exist_ok=True)
        started = []
        for _ in range(count):
            # Bound here and handed down (as `agentbus up` does): a port chosen now and bound by the child later
            # can be taken in between, and the child then dies on start.
            worker_env = {**self.env(), **(env or {})}
            with bind_http_port(worker_env.get("AGENTBUS_HTTP_HOST", "127.0.0.1"), 0) as listener:
                port = listener.getsockname()[1]
                log_path = self.root / f"{name}-{port}.log"
                argv = ["worker", name, *args]
                if self.forked:
                    process: WorkerProcess = start_command(argv, env=worker_env, log_path=log_path, listener=listener)
                else:
                    process = start_interpreter(argv, env=worker_env, log_path=log_path, listener=listener)
            worker = Worker(name, process, port, log_path)
            self.workers.append(worker)
            started.append(worker)
        return started

    def start_all(self, instances: int = 1) -> None:
        for name in ("ingestion", "normalization", "transcripts", "tools"):
            self.start(name, instances)
        self.wait_ready()

    def wait_ready(self, timeout_s: float = 240.0, workers: Sequence[Worker] | None = None) -> None:
        """Until every started worker answers ``/readyz``. The default is generous on purpose: a worker
        process spends ~2 s of CPU importing and starting, and the full suite under a shared machine's
        load (other suites beside it) was seen to take over 60 s for that (``ingestion not ready``).
        ``workers``: only these (a test that killed one waits for its replacement alone)."""
        deadline = time.monotonic() + timeout_s
        for worker in self.workers if workers is None else workers:
            while True:
                if worker.process.poll() is not None:
                    raise RuntimeError(f"{worker.name} exited: {worker.log_path.read_text()[-2000:]}")
                try:
                    with urllib.request.urlopen(f"http://127.0.0.1:{worker.port}/readyz", timeout=1) as reply:
                        if reply.status == 200:
                            break
                except (urllib.error.URLError, OSError):
                    pass
                if time.monotonic() > deadline:
                    raise TimeoutError(f"{worker.name} not ready: {worker.log_path.read_text()[-2000:]}")
                time.sleep(0.05)

    def of(self, name: str) -> list[Worker]:
        return [w for w in self.workers if w.name == name and w.process.poll() is None]

    def kill(self, worker: Worker) -> None:
        worker.process.send_signal(signal.SIGKILL)
        worker.process.wait()

    def stop(self) -> None:
        """SIGTERM every worker; one still up after :data:`STOP_GRACE_S` is SIGKILLed (a graceful stop waits for
        running tool jobs, a background agent's among them; the tests of graceful stops wait for it themselves)."""
        for worker in self.workers:
            if worker.process.poll() is None:
                worker.process.send_signal(signal.SIGTERM)
        for worker in self.workers:
            try:
                worker.process.wait(timeout=STOP_GRACE_S)
            except subprocess.TimeoutExpired:
                worker.process.kill()
                worker.process.wait()

    def client(self) -> AgentbusClient:
        return AgentbusClient.connect(self.redis_url, names=self.names)

    def logs(self) -> str:
        return "\n".join(f"== {w.name}:{w.port}\n{w.log_path.read_text(errors='replace')}" for w in self.workers)


async def eventually(check: object, *, timeout_s: float = 30.0, interval_s: float = 0.05) -> None:
    """Await ``check()`` (an async callable returning bool) until it is true."""
    deadline = time.monotonic() + timeout_s
    while True:
        if await check():  # type: ignore[operator]
            return
        if time.monotonic() > deadline:
            raise TimeoutError("condition not met in time")
        await asyncio.sleep(interval_s)
