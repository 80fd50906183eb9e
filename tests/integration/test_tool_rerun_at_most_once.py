"""A tool job re-run after its worker was SIGKILLed runs no side-effecting call twice (issue 19 "SIGKILL of
any worker ... duplicates nothing"): two tool workers, one killed while the job's appending command runs;
the peer takes the job over, answers that call with the missing-result placeholder (it may have run, so it
runs at most once) and runs the job's harmless call again with its real output. (The killed worker's sandboxed
command dies with it, so here it ran zero times.)"""

from __future__ import annotations

import asyncio
import uuid

import pytest

from agentbus_redis.messages.constants import SYNTHETIC_TOOL_RESULT_PLACEHOLDER
from agentbus_redis.messages.content import TextBlock, ToolUseBlock
from agentbus_redis.messages.factories import create_assistant_message
from tests.integration.approval_helpers import result_block, result_for
from tests.integration.cluster import WorkerCluster, eventually
from tests.integration.work_holders import await_job_holder

pytestmark = [pytest.mark.integration, pytest.mark.slow]


@pytest.fixture
def two_tool_workers(cluster: WorkerCluster) -> WorkerCluster:
    cluster.extra_env.update({"AGENTBUS_TOOLS__TIMEOUT_S": "30", "AGENTBUS_TOOLS__DEADLINE_S": "120"})
    cluster.start("ingestion")
    cluster.start("tools", 2)
    cluster.wait_ready(timeout_s=240)
    return cluster


async def test_a_side_effecting_call_of_a_job_whose_worker_died_runs_at_most_once(
    two_tool_workers: WorkerCluster,
) -> None:
    cluster = two_tool_workers
    session, name = f"rerun-{uuid.uuid4().hex[:8]}", uuid.uuid4().hex[:6]
    started, appended = cluster.workspace / f"{name}.started", cluster.workspace / f"{name}.log"
    append = ToolUseBlock(
        id="toolu_append",
        name="Bash",
        input={"command": f"echo go > {started.name}; sleep 3; echo a >> {appended.name}"},
    )
    harmless = ToolUseBlock(id="toolu_echo", name="Bash", input={"command": "echo token"})
    async with cluster.client() as bus:
        await bus.send_prompt(session, "go")
        await bus.send_assistant(session, create_assistant_message([TextBlock(text="on it"), append, harmless]))

        async def appending() -> bool:
            return started.exists()

        await eventually(appending, timeout_s=60)
        victim = await await_job_holder(bus, cluster, session)
        cluster.kill(victim)  # its sandboxed command dies with it (bubblewrap's --die-with-parent): no append

        append_result = result_block(await result_for(bus, session, append.id))
        assert (append_result.content, append_result.is_error) == (SYNTHETIC_TOOL_RESULT_PLACEHOLDER, True)
        echo_result = result_block(await result_for(bus, session, harmless.id))
        assert (echo_result.content, echo_result.is_error) == ("token", None)
        await asyncio.sleep(4.0)  # past the killed attempt's sleep: an append would have landed by now
    assert not appended.exists()  # the peer did not run it again; unsandboxed, the orphan would append once
