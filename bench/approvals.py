"""What waiting for a person costs the bus (issue 19 §H), beyond the person: a tool call allowed by a rule
against the same call parked for approval and allowed by an SDK loop at once.

    uv run python bench/approvals.py                  # ~1 minute, most of it starting workers
    uv run python bench/approvals.py --calls 50

Measured per call, from the reply's XADD until the session's log has the call's result:
- **direct**: ``echo`` (allowed by a rule) runs at once;
- **approved**: ``printf`` asks; the tool worker parks it (``approval_requested`` through ingestion, the
  request stored), an ``async for req in bus.approvals()`` loop answers ``allow`` as soon as it sees it,
  ingestion releases a continuation job, a tool worker runs it. Reported with its two halves: reply →
  request visible to the SDK, and answer → result.
The ratio approved ÷ direct (medians) is the figure; both run in the same deployment (one ingestion, one
tool worker, a private Redis), one call at a time, the two kinds interleaved.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from agentbus_redis.local.redis_server import start_local_redis
from agentbus_redis.messages.content import ToolResultBlock, ToolUseBlock
from agentbus_redis.messages.factories import create_assistant_message
from agentbus_redis.messages.kinds import UserMessage
from agentbus_redis.sdk.client import AgentbusClient
from tests.integration.cluster import WorkerCluster


async def until_result(bus: AgentbusClient, session: str, tool_use_id: str) -> float:
    async for entry in bus.follow(session, block_ms=50):
        message = entry.message
        if isinstance(message, UserMessage) and any(
            isinstance(block, ToolResultBlock) and block.tool_use_id == tool_use_id for block in message.blocks
        ):
            return time.perf_counter()
    raise AssertionError("unreachable")


async def one_call(
    bus: AgentbusClient, command: str, answered: dict[str, tuple[float, float]]
) -> tuple[float, float, float]:
    """(total, reply → request seen, answer → result) seconds; the halves are 0 for a direct call."""
    session = f"bench-{uuid.uuid4().hex[:12]}"
    call = ToolUseBlock(id=f"toolu_{uuid.uuid4().hex[:12]}", name="Bash", input={"command": command})
    waiter = asyncio.create_task(until_result(bus, session, call.id))
    await asyncio.sleep(0.01)  # the follower is reading
    start = time.perf_counter()
    await bus.send_assistant(session, create_assistant_message([call]))
    done = await waiter
    await asyncio.sleep(0)  # the approver records its answer right after publishing it
    seen, allowed = answered.pop(session, (start, start))
    return done - start, seen - start, done - allowed


async def run(calls: int) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        server = start_local_redis(root / "redis")
        workers = WorkerCluster(
            redis_url=server.url,
            root=root / "bus",
            extra_env={"AGENTBUS_TOOLS__ASK_POLICY": "approve", "LOG_LEVEL": "WARNING"},
        )
        try:
            workers.start("ingestion")
            workers.start("tools")
            workers.wait_ready()
            async with workers.client() as bus, workers.client() as person:
                answered: dict[str, tuple[float, float]] = {}

                async def approve_everything() -> None:
                    async for req in person.approvals():
                        seen = time.perf_counter()
                        await req.allow()
                        answered[req.session_id] = (seen, time.perf_counter())

                approver = asyncio.create_task(approve_everything())
                await one_call(bus, "echo warm", {})  # connections, first job
                direct, approved = [], []
                for _ in range(calls):  # interleaved: both kinds see the same load on a shared box
                    direct.append(await one_call(bus, "echo hi", {}))
                    approved.append(await one_call(bus, "printf hi", answered))
                approver.cancel()
        finally:
            workers.stop()
            server.stop()

    def median_ms(rows: list[tuple[float, float, float]], index: int) -> float:
        return statistics.median(row[index] for row in rows) * 1000

    d, a = median_ms(direct, 0), median_ms(approved, 0)
    print(f"calls per kind: {calls}")
    print(f"direct   (allowed by a rule):   median {d:7.1f} ms")
    print(f"approved (parked, allowed now): median {a:7.1f} ms")
    print(f"  reply -> request seen by the SDK: median {median_ms(approved, 1):7.1f} ms")
    print(f"  answer -> result in the log:      median {median_ms(approved, 2):7.1f} ms")
    print(f"ratio approved / direct: {a / d:.2f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--calls", type=int, default=30)
    asyncio.run(run(parser.parse_args().calls))


if __name__ == "__main__":
    main()
