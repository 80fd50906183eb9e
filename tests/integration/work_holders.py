"""Which worker process holds a piece of work right now, for tests that SIGKILL exactly that one: the lease
owner of a session's shard in an ordered lane, the tool worker with a session's job pending, the model
worker streaming a session's reply. Consumer and lease-owner names are ``<worker>-<host>-<pid>-<random>``
(``workers/process.process_owner``)."""

from __future__ import annotations

from typing import Any

import orjson

from agentbus_redis.runtime.codec import DATA_FIELD
from agentbus_redis.sdk.client import AgentbusClient
from agentbus_redis.streams.topology import TOOLS_GROUP, Topology
from tests.integration.cluster import Worker, WorkerCluster, eventually


def pid_of(owner: str) -> int:
    """The pid in a worker's consumer / lease-owner name."""
    return int(owner.split("-")[-2])


def live_worker(cluster: WorkerCluster, name: str, owner: str) -> Worker | None:
    return next((w for w in cluster.of(name) if w.process.pid == pid_of(owner)), None)


async def lane_owner(bus: AgentbusClient, cluster: WorkerCluster, lane: str, session: str) -> Worker:
    """The live worker holding the lease of ``session``'s shard in ``lane`` (waits while it moves)."""
    holder: list[Worker] = []

    async def held() -> bool:
        raw: Any = await bus.redis.get(cluster.names.lease_key(lane, cluster.names.shard_of(session)))
        found = live_worker(cluster, lane, raw.decode()) if raw is not None else None
        holder[:] = [found] if found is not None else []
        return bool(holder)

    await eventually(held, timeout_s=60)
    return holder[0]


async def job_holder(bus: AgentbusClient, cluster: WorkerCluster, session: str) -> Worker | None:
    """The live tool worker with a job of ``session`` pending (delivered, not acked), if any."""
    stream = Topology(cluster.names).tool_jobs_for(session)
    pending: Any = await bus.redis.xpending_range(stream, TOOLS_GROUP, min="-", max="+", count=1000)
    for row in pending:
        rows: Any = await bus.redis.xrange(stream, min=row["message_id"], max=row["message_id"])
        if rows and orjson.loads(rows[0][1][DATA_FIELD.encode()]).get("session_id") == session:
            consumer = row["consumer"]
            return live_worker(cluster, "tools", consumer.decode() if isinstance(consumer, bytes) else str(consumer))
    return None


async def await_job_holder(bus: AgentbusClient, cluster: WorkerCluster, session: str) -> Worker:
    """:func:`job_holder`, waited for."""
    holder: list[Worker] = []

    async def holding() -> bool:
        found = await job_holder(bus, cluster, session)
        holder[:] = [found] if found is not None else []
        return bool(holder)

    await eventually(holding, timeout_s=60)
    return holder[0]


async def model_caller(bus: AgentbusClient, cluster: WorkerCluster, session: str) -> Worker:
    """The model worker streaming ``session``'s reply now (its in-flight record's owner)."""
    record = orjson.loads(await bus.redis.get(Topology(cluster.names).model_inflight(session)) or b"{}")
    assert record.get("state") == "streaming", record
    worker = live_worker(cluster, "model", str(record["owner"]))
    assert worker is not None, record
    return worker
