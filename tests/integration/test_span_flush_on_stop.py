"""OTel spans still in the batch span processor's window are exported when a worker stops gracefully (SIGTERM).

uvicorn re-raises the signal once the app shut down, so the SDK's ``atexit`` shutdown never runs: without the
flush of the worker's shutdown, every span of the last ``OTEL_BSP_SCHEDULE_DELAY`` was lost. The schedule delay
here is an hour, so nothing but that flush can export the span; every worker type shares the shutdown path
(``workers/process.build_app``), the tool worker stands in for them.
"""

from __future__ import annotations

import signal
import time

import pytest
import redis.asyncio as aioredis

from agentbus_redis.bus.events import ToolJob, ToolResultReport, parse_ingress
from agentbus_redis.messages.content import ToolUseBlock
from agentbus_redis.runtime.codec import entry_fields
from agentbus_redis.streams.topology import Topology
from tests.integration.cluster import WorkerCluster, eventually
from tests.integration.test_tool_catalog_workers import console_spans

pytestmark = [pytest.mark.integration, pytest.mark.slow]

JOB_TRACE = "6bf92f3577b34da6a3ce929d0e0e4736"


async def test_a_span_ended_before_sigterm_is_exported_by_the_graceful_stop(cluster: WorkerCluster) -> None:
    cluster.extra_env.update(
        {"OTEL_TRACES_EXPORTER": "console", "OTEL_BSP_SCHEDULE_DELAY": "3600000", "PYTHONUNBUFFERED": "1"}
    )
    (worker,) = cluster.start("tools")
    cluster.wait_ready()
    topology = Topology(cluster.names)
    session = "span-flush"
    (workspace_file := cluster.workspace / "flush.txt").write_text("hi\n")
    now_ms = int(time.time() * 1000)
    job = ToolJob(
        session_id=session,
        assistant_uuid="assistant-flush",
        tool_uses=[ToolUseBlock(id="toolu_flush", name="Read", input={"file_path": str(workspace_file)})],
        dispatched_ms=now_ms,
        deadline_ms=now_ms + 60_000,
        traceparent=f"00-{JOB_TRACE}-20f067aa0ba902b7-01",
    )
    async with aioredis.Redis.from_url(cluster.redis_url) as redis:
        await redis.xadd(topology.tool_jobs_for(session), entry_fields(job))  # type: ignore[arg-type]

        async def answered() -> bool:
            entries = await redis.xrange(topology.ingress_for(session))
            return any(isinstance(parse_ingress(fields[b"data"]).payload, ToolResultReport) for _, fields in entries)

        await eventually(answered, timeout_s=60)
    assert not [span for span in console_spans(cluster.logs()) if span["name"] == "execute_tool Read"]

    worker.process.send_signal(signal.SIGTERM)
    assert worker.process.wait(timeout=60) in (0, -signal.SIGTERM)

    spans = [span for span in console_spans(cluster.logs()) if span["name"] == "execute_tool Read"]
    assert [span["context"]["trace_id"] for span in spans] == [f"0x{JOB_TRACE}"], cluster.logs()
