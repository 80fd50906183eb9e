"""Fixtures of the integration tests that share one worker deployment across a module."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import redis

from services.runtime.local_redis import LocalRedis
from tests.integration.cluster import WorkerCluster


@pytest.fixture(scope="module")
def module_cluster(redis_server: LocalRedis, tmp_path_factory: pytest.TempPathFactory) -> Iterator[WorkerCluster]:
    """Worker processes shared by every test of a module (the module starts the ones it needs).

    Starting the workers is the slow part of an integration test; tests of a module that share them
    stay isolated by using their own session ids. Redis is flushed before and after the module.
    """
    client = redis.Redis.from_url(redis_server.url)
    client.flushall()
    workers = WorkerCluster(redis_url=redis_server.url, root=tmp_path_factory.mktemp("cluster"))
    try:
        yield workers
    finally:
        workers.stop()
        client.flushall()
        client.close()
