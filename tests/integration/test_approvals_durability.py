"""Issue 19 §H: approvals that outlive their deadline, and approvals pending across a Redis restart (a
private redis-server with AOF). Real ingestion and tool worker processes; each test has its own deployment."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from agentbus_redis.approvals.records import approval_timeout_text
from agentbus_redis.local.redis_server import LocalRedis, start_local_redis
from tests.integration.approval_helpers import (
    APPROVE_ENV,
    counting_call,
    new_session,
    pending_for,
    ran,
    reply_with,
    result_block,
    result_for,
    transcript_result,
)
from tests.integration.cluster import WorkerCluster
from tests.integration.test_ingress_door import AclCluster, acl_cluster  # noqa: F401 (fixture)

pytestmark = [pytest.mark.integration, pytest.mark.slow]


@pytest.fixture
def quick_timeout(cluster: WorkerCluster) -> WorkerCluster:
    cluster.extra_env.update({**APPROVE_ENV, "AGENTBUS_TOOLS__APPROVAL_TIMEOUT_S": "1"})
    for name in ("ingestion", "tools", "transcripts"):
        cluster.start(name)
    cluster.wait_ready()
    return cluster


async def test_h_timed_out_approval_is_denied_with_the_timeout_text(quick_timeout: WorkerCluster) -> None:
    session, file = new_session(), f"{uuid.uuid4().hex[:6]}.txt"
    call = counting_call("timeout", file)
    async with quick_timeout.client() as bus:
        await reply_with(bus, session, call)
        message = await result_for(bus, session, call.id)
        assert result_block(message).content == approval_timeout_text(1)
        assert message.tool_use_result == f"Error: {approval_timeout_text(1)}"
        assert await bus.pending_approvals(session) == []
    block, tool_use_result = await transcript_result(quick_timeout, session, call.id)
    assert (block["content"], tool_use_result) == (approval_timeout_text(1), f"Error: {approval_timeout_text(1)}")
    assert ran(quick_timeout, file) == ""


@pytest.fixture
def aof_deployment(tmp_path: Path) -> Iterator[tuple[LocalRedis, WorkerCluster]]:
    server = start_local_redis(tmp_path / "redis", appendonly=True)
    workers = WorkerCluster(redis_url=server.url, root=tmp_path / "bus", extra_env=dict(APPROVE_ENV))
    try:
        workers.start("ingestion")
        workers.start("tools")
        workers.wait_ready()
        yield server, workers
    finally:
        workers.stop()
        server.stop()


async def test_h_pending_approval_survives_a_redis_restart(aof_deployment: tuple[LocalRedis, WorkerCluster]) -> None:
    server, workers = aof_deployment
    session, file = new_session(), f"{uuid.uuid4().hex[:6]}.txt"
    call = counting_call("restart", file)
    async with workers.client() as bus:
        await reply_with(bus, session, call)
        (before,) = await pending_for(bus, session)
    await asyncio.to_thread(server.restart)
    async with workers.client() as bus:
        (req,) = await pending_for(bus, session)
        assert req.request == before.request
        await req.allow()
        message = await result_for(bus, session, call.id)
        assert result_block(message).is_error is None
        await asyncio.sleep(1.0)  # a duplicate run would append within this
    assert ran(workers, file) == "x"


async def test_h_approval_round_trip_under_the_deploy_acl(acl_cluster: AclCluster) -> None:  # noqa: F811
    """Each worker as its own ACL user (deploy/redis/users.acl), the person with the producer credential: the
    tool worker parks and stores, the producer lists and answers, ingestion releases the call."""
    cluster = acl_cluster
    cluster.extra_env.update(APPROVE_ENV)
    cluster.start("ingestion")
    cluster.start("tools")
    cluster.wait_ready()
    session, file = new_session(), f"{uuid.uuid4().hex[:6]}.txt"
    call = counting_call("acl", file)
    async with cluster.producer() as bus:
        await reply_with(bus, session, call)
        (req,) = await pending_for(bus, session)
        assert await bus.approval(req.approval_id) == req
        await req.always_allow()
        await result_for(bus, session, call.id)
        assert cluster.alive(), cluster.logs()
    assert ran(cluster, file) == "x"
