"""R8.9 on a tool worker: the interrupts channel names a session, the mark in Redis says why (bus/interrupts.py).

A readable mark's reason decides what of the running calls stops; a mark that cannot be read (Redis gone) still
interrupts the session's jobs, as ``interrupt`` (the calls not started are rejected, ``block`` ones run on), and
says so in a warning. The Redis here is a real private server, stopped for the second case.
"""

from __future__ import annotations

from pathlib import Path

import redis.asyncio as aioredis
import structlog

from agentbus_redis.bus.interrupts import format_interrupt_mark
from agentbus_redis.local.redis_server import start_local_redis
from agentbus_redis.permissions.decide import PermissionContext
from agentbus_redis.runtime.slots import JobSlots
from agentbus_redis.streams.names import StreamNames
from agentbus_redis.streams.topology import TOOLS_GROUP, Topology
from agentbus_redis.workers.tools.executor import ToolTimeouts
from agentbus_redis.workers.tools.registry import ToolRegistry
from agentbus_redis.workers.tools.worker import ToolWorker, _Running

TOPOLOGY = Topology(StreamNames(prefix="agentbus:", shards=1))


def _worker(client: aioredis.Redis, root: Path) -> ToolWorker:
    return ToolWorker(
        client,
        TOPOLOGY,
        consumer="tools-test",
        registry=ToolRegistry([]),
        permissions=PermissionContext(workspace_root=str(root)),
        timeouts=ToolTimeouts(default_s=5),
        keepalive_s=1,
        internal_key=b"k" * 32,
        slots=JobSlots(client, group=TOOLS_GROUP, size=1),
    )


def _running(worker: ToolWorker, session: str, entry_id: str) -> _Running:
    """A job of ``session`` as the worker lists it while it runs (the interrupt acts on this record)."""
    running = _Running(session_id=session, dispatched_ms=0)
    worker._running[("agentbus:tool_jobs", entry_id)] = running
    return running


async def test_the_marks_reason_decides_and_an_unreadable_mark_still_interrupts(tmp_path: Path) -> None:
    server = start_local_redis(tmp_path / "redis")
    client = aioredis.Redis.from_url(server.url, socket_connect_timeout=1)
    try:
        worker = _worker(client, tmp_path)
        esc, other = _running(worker, "s-esc", "1-0"), _running(worker, "s-other", "2-0")
        await client.set(TOPOLOGY.interrupt("s-esc"), format_interrupt_mark(1_000, "user_cancel"))
        await worker.interrupt_marked("s-esc")
        assert esc.interrupt.is_set()
        assert esc.interrupt.stop_all.is_set()  # esc: the running block calls stop too
        assert not other.interrupt.is_set()  # another session's job runs on

        server.stop()  # Redis away: the mark cannot be read
        typed = _running(worker, "s-typed", "3-0")
        with structlog.testing.capture_logs() as logs:
            await worker.interrupt_marked("s-typed")
        assert typed.interrupt.is_set()
        assert not typed.interrupt.stop_all.is_set()
        assert [(entry["event"], entry["log_level"], entry["session_id"]) for entry in logs] == [
            ("interrupt_reason_unread", "warning", "s-typed")
        ]
    finally:
        await client.aclose()
        server.stop()
