"""Fixtures of the integration tests that share one worker deployment across a module."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator

import pytest
import redis.asyncio as aioredis

from agentbus_redis.runtime import redis_client
from tests.conftest import flushed_target_url
from tests.integration.cluster import WorkerCluster
from tests.integration.fake_model import FakeModelProcess, start_fake_model


@pytest.fixture(scope="module")
def module_cluster(
    redis_target: str, request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[WorkerCluster]:
    """Worker processes shared by every test of a module (the module starts the ones it needs).

    Starting the workers is the slow part of an integration test; tests of a module that share them
    stay isolated by using their own session ids. Redis (``redis_target``: one server or the cluster) is
    flushed before and after the module.
    """
    url = flushed_target_url(request, redis_target)
    workers = WorkerCluster(redis_url=url, root=tmp_path_factory.mktemp("cluster"))
    try:
        yield workers
    finally:
        workers.stop()
        flushed_target_url(request, redis_target)


@pytest.fixture
def target_url(redis_target: str, request: pytest.FixtureRequest) -> str:
    """The emptied URL of the test target (``redis_target``: one Redis or the cluster)."""
    return flushed_target_url(request, redis_target)


@pytest.fixture
async def target_redis(target_url: str) -> AsyncIterator[aioredis.Redis]:
    """A client of the emptied test target, as a worker connects (``Redis`` or ``RedisCluster``)."""
    client = redis_client.connect(target_url)
    try:
        yield client
    finally:
        await client.aclose()


@pytest.fixture(scope="module")
def fake(tmp_path_factory: pytest.TempPathFactory) -> Iterator[FakeModelProcess]:
    """The fake Anthropic-compatible server as a process, one per test module (a module may script it per session)."""
    server = start_fake_model(tmp_path_factory.mktemp("fake") / "fake.log")
    try:
        yield server
    finally:
        server.stop()
