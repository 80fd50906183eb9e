"""Test-wide fixtures.

Redis: every test session (every xdist worker) runs its own ``redis-server`` on a free port, so the
suite never touches a developer's Redis and never skips because none is running. Each test that asks
for ``redis_url`` gets a flushed logical database of that private server.
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest
import redis
import redis.asyncio as aioredis

from services.runtime.local_redis import LocalRedis, start_local_redis
from tests.integration.cluster import WorkerCluster

REPO_ROOT = Path(__file__).resolve().parent.parent
REFERENCE_ROOT = REPO_ROOT.parent / "shared"
CORPUS_ROOT = Path(os.environ.get("AGENTBUS_CORPUS", REFERENCE_ROOT / "corpus"))


@pytest.fixture(scope="session")
def corpus_root() -> Path:
    """The reference transcript corpus beside the repository (never copied into it)."""
    if not CORPUS_ROOT.is_dir():
        pytest.fail(f"reference corpus not found at {CORPUS_ROOT}; set AGENTBUS_CORPUS")
    return CORPUS_ROOT


@pytest.fixture(scope="session")
def redis_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalRedis]:
    """A private redis-server for this test session."""
    server = start_local_redis(tmp_path_factory.mktemp("redis"))
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def redis_url(redis_server: LocalRedis) -> Iterator[str]:
    """URL of a flushed database on the private server; flushed again afterwards."""
    client = redis.Redis.from_url(redis_server.url)
    client.flushall()
    try:
        yield redis_server.url
    finally:
        client.flushall()
        client.close()


@pytest.fixture
async def aredis(redis_url: str) -> AsyncIterator[aioredis.Redis]:
    """An asyncio client on the test database."""
    client = aioredis.Redis.from_url(redis_url)
    try:
        yield client
    finally:
        await client.aclose()


@pytest.fixture
def cluster(redis_url: str, tmp_path: Path) -> Iterator[WorkerCluster]:
    """Worker processes against the test Redis; the test starts the ones it needs."""
    workers = WorkerCluster(redis_url=redis_url, root=tmp_path)
    try:
        yield workers
    finally:
        workers.stop()
