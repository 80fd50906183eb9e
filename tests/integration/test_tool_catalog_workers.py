"""Issue 18 with real ``agentbus worker tools`` processes: each publishes its tools in the catalog when it starts,
removes them when it stops (SIGTERM), and a killed one (SIGKILL) drops out once its entry expires. With
``OTEL_TRACES_EXPORTER=console`` the worker's ``execute_tool`` spans (M11.8) continue the job's traceparent."""

from __future__ import annotations

import json
import signal
import time
from typing import Any

import pytest
import redis.asyncio as aioredis

from agentbus_redis.bus.events import ToolJob, ToolResultReport, parse_ingress
from agentbus_redis.messages.content import ToolUseBlock
from agentbus_redis.runtime.codec import entry_fields
from agentbus_redis.stores.tool_catalog import read_catalog_snapshot, read_tool_catalog
from agentbus_redis.streams.topology import Topology
from tests.integration.cluster import Worker, WorkerCluster, eventually

pytestmark = [pytest.mark.integration, pytest.mark.slow]

BUILTIN = ["Agent", "Bash", "Edit", "Glob", "Grep", "Read", "SendMessage", "Write"]
"""What a tool worker runs: the builtin tools and the Agent tool (issue 19, sub-agents)."""
JOB_TRACE = "5bf92f3577b34da6a3ce929d0e0e4736"
JOB_SPAN = "10f067aa0ba902b7"


async def live_workers(redis: aioredis.Redis, topology: Topology) -> list[str]:
    return [entry.worker for entry in (await read_catalog_snapshot(redis, topology)).live]


async def catalog_fields(redis: aioredis.Redis, topology: Topology) -> set[str]:
    return {field.decode() for field in await redis.hkeys(topology.tool_catalog)}


def stop(worker: Worker) -> None:
    """SIGTERM, and wait for the process to exit (a graceful stop)."""
    worker.process.send_signal(signal.SIGTERM)
    assert worker.process.wait(timeout=30) in (0, -signal.SIGTERM)  # uvicorn re-raises the signal once stopped


def console_spans(text: str) -> list[dict[str, Any]]:
    """The spans the SDK's console exporter printed (indented JSON objects) among the log lines."""
    decoder = json.JSONDecoder()
    spans: list[dict[str, Any]] = []
    position = text.find('{\n    "name"')
    while position != -1:
        span, end = decoder.raw_decode(text, position)
        spans.append(span)
        position = text.find('{\n    "name"', end)
    return spans


async def test_workers_publish_on_start_withdraw_on_stop_and_trace_their_calls(cluster: WorkerCluster) -> None:
    """The TTL (10 min) outlasts the test: an entry that disappears was removed by its worker, not expired."""
    cluster.extra_env.update(
        {
            "AGENTBUS_TOOLS__CATALOG_REFRESH_S": "20",
            "AGENTBUS_TOOLS__CATALOG_TTL_S": "600",
            "OTEL_TRACES_EXPORTER": "console",
            # Exported (and printed) within 50 ms, so the test sees the span before it stops the worker (the
            # graceful stop flushes the rest: test_span_flush_on_stop.py).
            "OTEL_BSP_SCHEDULE_DELAY": "50",
            "PYTHONUNBUFFERED": "1",
        }
    )
    first, second = cluster.start("tools", 2)
    cluster.wait_ready()
    topology = Topology(cluster.names)
    async with aioredis.Redis.from_url(cluster.redis_url) as redis:
        workers = await live_workers(redis, topology)
        assert len(workers) == 2, cluster.logs()
        assert all(worker.startswith("tools-") for worker in workers)
        assert [definition.name for definition in await read_tool_catalog(redis, topology)] == BUILTIN

        # One call through a worker, on a job whose traceparent the test chose.
        session = "catalog-trace"
        (workspace_file := cluster.workspace / "hello.txt").write_text("hi\n")
        now_ms = int(time.time() * 1000)
        job = ToolJob(
            session_id=session,
            assistant_uuid="assistant-trace",
            tool_uses=[ToolUseBlock(id="toolu_trace", name="Read", input={"file_path": str(workspace_file)})],
            dispatched_ms=now_ms,
            deadline_ms=now_ms + 60_000,
            traceparent=f"00-{JOB_TRACE}-{JOB_SPAN}-01",
        )
        await redis.xadd(topology.tool_jobs_for(session), entry_fields(job))  # type: ignore[arg-type]

        async def answered() -> bool:
            entries = await redis.xrange(topology.ingress_for(session))
            return any(isinstance(parse_ingress(fields[b"data"]).payload, ToolResultReport) for _, fields in entries)

        await eventually(answered, timeout_s=30)

        async def traced() -> bool:
            return any(span["name"].startswith("execute_tool") for span in console_spans(cluster.logs()))

        await eventually(traced, timeout_s=10)

        stop(first)  # SIGTERM: a graceful stop
        assert len(await live_workers(redis, topology)) == 1
        stop(second)
        assert await catalog_fields(redis, topology) == set()
        assert await read_tool_catalog(redis, topology) == []

    spans = [span for span in console_spans(cluster.logs()) if span["name"].startswith("execute_tool")]
    assert len(spans) == 1, cluster.logs()
    (span,) = spans
    assert span["name"] == "execute_tool Read"
    assert span["kind"] == "SpanKind.INTERNAL"
    assert span["context"]["trace_id"] == f"0x{JOB_TRACE}"
    assert span["parent_id"] == f"0x{JOB_SPAN}"
    assert span["attributes"]["gen_ai.operation.name"] == "execute_tool"
    assert span["attributes"]["gen_ai.tool.call.id"] == "toolu_trace"
    assert span["attributes"]["gen_ai.conversation.id"] == session
    assert "error.type" not in span["attributes"]


async def test_a_killed_worker_drops_out_when_its_entry_expires(cluster: WorkerCluster) -> None:
    cluster.extra_env.update({"AGENTBUS_TOOLS__CATALOG_REFRESH_S": "0.5", "AGENTBUS_TOOLS__CATALOG_TTL_S": "4"})
    (worker,) = cluster.start("tools")
    cluster.wait_ready()
    topology = Topology(cluster.names)
    async with aioredis.Redis.from_url(cluster.redis_url) as redis:
        assert [definition.name for definition in await read_tool_catalog(redis, topology)] == BUILTIN
        (owner,) = await live_workers(redis, topology)
        cluster.kill(worker)  # SIGKILL: no goodbye
        assert await catalog_fields(redis, topology) == {owner}

        async def expired() -> bool:
            return await read_tool_catalog(redis, topology) == []

        await eventually(expired, timeout_s=10)
        assert await catalog_fields(redis, topology) == set()  # the reader pruned it
