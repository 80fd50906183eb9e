"""Issue 15: graceful stop with slots. A tool worker that gets SIGTERM stops reading, lets the job in its slot
run to its end, writes its result, acks its entry, and exits. Real Redis, a real tool worker process.

A module of its own: its worker must be the only tool worker on the test Redis. Beside
``test_tool_slots.py``'s shared worker (a module-scoped worker alive through that module), the two
competed for the job, and when the shared one took it, the command ran in that worker's sandbox, where
this test's workspace is not mounted: the job never showed as started (seen under the full suite's load).
"""

from __future__ import annotations

import asyncio
import json
import signal

import pytest
import redis.asyncio as aioredis

from agentbus_redis.runtime.codec import entry_fields
from agentbus_redis.streams.topology import Topology
from tests.integration.cluster import WorkerCluster, eventually
from tests.integration.test_tool_slots import bash_job, pending_jobs, results_in_order

pytestmark = [pytest.mark.integration, pytest.mark.slow]


async def test_sigterm_lets_the_running_job_finish_and_ack(cluster: WorkerCluster) -> None:
    """Graceful stop with slots: the worker stops reading, the job in its slot runs to its end, its
    result is written and its entry acked, then the process exits."""
    cluster.extra_env.update({"AGENTBUS_TOOLS__TIMEOUT_S": "120", "AGENTBUS_TOOLS__ALLOW": json.dumps(["Bash"])})
    [worker] = cluster.start("tools")
    cluster.wait_ready()
    topology = Topology(cluster.names)
    session = "slots-sigterm"
    release = cluster.workspace / "release-sigterm-job"
    running = cluster.workspace / "sigterm-job-runs"
    command = f"touch {running}; for _ in $(seq 2400); do [ -e {release} ] && break; sleep 0.05; done; echo finished"
    async with aioredis.Redis.from_url(cluster.redis_url) as redis:
        await redis.xadd(topology.tool_jobs_for(session), entry_fields(bash_job(session, "running", command)))  # type: ignore[arg-type]

        async def runs() -> bool:
            # The command itself says so: an entry read but not yet started when SIGTERM comes is rightly left
            # pending for redelivery (not what this test is about), and under load that window is wide.
            return running.exists() and await pending_jobs(redis, topology) == 1

        try:
            await eventually(runs, timeout_s=60)
        except TimeoutError:
            state = f"command started: {running.exists()}, pending jobs: {await pending_jobs(redis, topology)}"
            pytest.fail(f"the job never ran with its entry pending ({state})\n{cluster.logs()[-6000:]}")
        worker.process.send_signal(signal.SIGTERM)
        release.touch()
        # uvicorn re-raises the signal once its graceful shutdown is done: -SIGTERM is a clean exit here.
        assert await asyncio.to_thread(worker.process.wait, 60) in (0, -signal.SIGTERM)
        assert "Traceback" not in cluster.logs()
        assert await results_in_order(redis, topology, session) == [("toolu_running", "finished")]
        assert await pending_jobs(redis, topology) == 0
