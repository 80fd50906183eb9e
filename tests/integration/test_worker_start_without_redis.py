"""Issue 15: a worker started while Redis is down waits for it instead of exiting ("Application startup
failed", exit code 3). It serves ``/healthz`` (alive) and ``/readyz`` (503, not started) meanwhile, logs one
line per attempt (no traceback), and once a redis-server comes up on its port it becomes ready and handles
an entry. A real worker process and a real redis-server started late."""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from agentbus_redis.local.redis_server import LocalRedis, free_port
from agentbus_redis.sdk.client import AgentbusClient
from agentbus_redis.streams.topology import Topology
from tests.integration.cluster import WorkerCluster, eventually

pytestmark = [pytest.mark.integration, pytest.mark.slow]

RETRY_LINE = "redis_unavailable_at_start"


def get(port: int, path: str) -> tuple[int, dict[str, object]]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=2) as reply:
            return reply.status, json.loads(reply.read())
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read())


def wait_for(check: object, *, timeout_s: float = 60.0) -> None:
    """Poll ``check()`` (a safety timeout only)."""
    deadline = time.monotonic() + timeout_s
    while not check():  # type: ignore[operator]
        assert time.monotonic() < deadline, "condition not met in time"
        time.sleep(0.05)


@pytest.fixture
def late_redis(tmp_path: Path) -> Iterator[LocalRedis]:
    """A redis-server on a free port, not started yet (the test starts it)."""
    server = LocalRedis(port=free_port(), directory=tmp_path / "late-redis")
    try:
        yield server
    finally:
        server.stop()


async def test_worker_waits_for_redis_then_serves(late_redis: LocalRedis, tmp_path: Path) -> None:
    cluster = WorkerCluster(redis_url=late_redis.url, root=tmp_path, extra_env={"LOG_LEVEL": "INFO"})
    try:
        (worker,) = cluster.start("ingestion")

        def retried_twice() -> bool:
            assert worker.process.poll() is None, worker.log_path.read_text()
            return worker.log_path.read_text().count(RETRY_LINE) >= 2

        wait_for(retried_twice)
        status, body = get(worker.port, "/readyz")
        assert status == 503
        assert body["checks"]["started"]["ok"] is False  # type: ignore[index]
        assert get(worker.port, "/healthz")[0] == 200  # waiting for Redis is not a reason to restart the pod

        late_redis.start()
        cluster.wait_ready()
        session = "late-redis-session"
        topology = Topology(cluster.names)
        async with AgentbusClient.connect(late_redis.url, names=cluster.names) as client:
            await client.send_prompt(session, "hello after the outage")

            async def logged() -> bool:
                return int(await client.redis.xlen(topology.log_for(session))) >= 1

            await eventually(logged)
        assert worker.process.poll() is None
        log = worker.log_path.read_text()
        retry_lines = [line for line in log.splitlines() if RETRY_LINE in line]
        assert all('"attempt"' in line for line in retry_lines)
        assert "Traceback" not in log
        assert "Application startup failed" not in log
    finally:
        cluster.stop()
