"""What the bus adds to an MCP tool call (issue 29): the same MCP tool called through the whole bus and directly
with the ``mcp`` SDK, alternated, as a ratio measured in one run.

    uv run python bench/mcp_tool_call.py              # ~1-2 minutes (most of it starting the workers)
    uv run python bench/mcp_tool_call.py --calls 50

The tool: ``get_current_time`` of ``mcp-server-time`` (PyPI), a stdio server.

- **Direct**: this process holds one SDK ``Client`` to its own copy of the server and times ``call_tool``.
- **Through the bus**: a private Redis, the fake Anthropic-compatible server, and the ingestion,
  normalization, transcripts, tools and model workers as processes; the tool worker connects to the server
  from a ``.mcp.json``. Each call is a fresh session: this process publishes a prompt, the fake model answers
  with a ``tool_use`` of ``mcp__time__get_current_time``, the tool worker calls the server and the result is
  applied to the session's log. Timed from the prompt's XADD to the ``tool_result`` read back from the log
  (polled every 2 ms). So it includes a model request (normalization, the model worker, the fake server's
  stream) as well as the tool job: the latency a user sees from prompt to tool result.
"""

from __future__ import annotations

import argparse
import asyncio
import atexit
import json
import os
import shutil
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from mcp.client.client import Client
from mcp.client.stdio import StdioServerParameters

from agentbus_redis.local.redis_server import start_local_redis
from agentbus_redis.messages.content import ToolResultBlock
from agentbus_redis.messages.kinds import UserMessage
from agentbus_redis.sdk.client import AgentbusClient
from tests.integration.cluster import TEST_ALLOW_RULES, WorkerCluster
from tests.integration.fake_model import start_fake_model
from tests.integration.model_turns import reply, text, tool_use

SERVER = [sys.executable, "-m", "mcp_server_time", "--local-timezone", "UTC"]
TOOL, ARGUMENTS = "get_current_time", {"timezone": "UTC"}


async def direct_call(client: Client) -> float:
    started = time.perf_counter()
    result = await client.call_tool(TOOL, ARGUMENTS)
    elapsed = time.perf_counter() - started
    assert not result.is_error
    return elapsed


async def bus_call(bus: AgentbusClient, fake_script: object, call_id: str) -> float:
    session = f"bench-mcp-{uuid.uuid4().hex[:10]}"
    fake_script(session, [reply(tool_use(call_id, "mcp__time__" + TOOL, **ARGUMENTS)), reply(text("ok"))])  # type: ignore[operator]
    started = time.perf_counter()
    await bus.send_prompt(session, "what time is it?")
    while True:
        for entry in await bus.history(session):
            message = entry.message
            if isinstance(message, UserMessage) and any(
                isinstance(block, ToolResultBlock) and block.tool_use_id == call_id for block in message.blocks
            ):
                elapsed = time.perf_counter() - started
                assert not any(isinstance(b, ToolResultBlock) and b.is_error for b in message.blocks), message
                return elapsed
        await asyncio.sleep(0.002)


async def run(args: argparse.Namespace) -> None:
    root = Path(tempfile.mkdtemp(prefix="agentbus-bench-mcp-"))
    atexit.register(shutil.rmtree, root, ignore_errors=True)
    redis_server = start_local_redis(root / "redis")
    fake = start_fake_model(root / "fake.log")
    config = root / ".mcp.json"
    config.write_text(json.dumps({"mcpServers": {"time": {"command": SERVER[0], "args": SERVER[1:]}}}))
    cluster = WorkerCluster(redis_url=redis_server.url, root=root / "cluster")
    cluster.extra_env.update(
        {
            "ANTHROPIC_API_KEY": "bench",
            "AGENTBUS_MODEL__BASE_URL": fake.base_url,
            "AGENTBUS_MODEL__MODEL": "claude-sonnet-4-6",
            "AGENTBUS_TOOLS__MCP_CONFIG": json.dumps([str(config)]),
            "AGENTBUS_TOOLS__ALLOW": json.dumps([*TEST_ALLOW_RULES, "mcp__time"]),
            "AGENTBUS_TOOLS__TIMEOUT_S": "30",
            "AGENTBUS_RETENTION__ENABLED": "false",
        }
    )
    try:
        for name in ("ingestion", "normalization", "transcripts", "tools", "model"):
            cluster.start(name)
        cluster.wait_ready(timeout_s=300)
        parameters = StdioServerParameters(command=SERVER[0], args=SERVER[1:])
        async with Client(parameters, mode="auto", cache=None) as direct, cluster.client() as bus:
            for index in range(args.warmup):  # the MCP tool reaching the catalog, connections, first-call imports
                await direct_call(direct)
                await asyncio.wait_for(bus_call(bus, fake.script, f"toolu_warm{index}"), timeout=120)
            direct_times: list[float] = []
            bus_times: list[float] = []
            for index in range(args.calls):
                direct_times.append(await direct_call(direct))
                bus_times.append(await bus_call(bus, fake.script, f"toolu_bench{index}"))
    finally:
        cluster.stop()
        fake.stop()
        redis_server.stop()
    direct_p50, bus_p50 = statistics.median(direct_times) * 1000, statistics.median(bus_times) * 1000
    direct_p90 = statistics.quantiles(direct_times, n=10)[-1] * 1000
    bus_p90 = statistics.quantiles(bus_times, n=10)[-1] * 1000
    print(f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores; {args.calls} calls each way")
    print(f"direct SDK call_tool     p50 {direct_p50:8.2f} ms   p90 {direct_p90:8.2f} ms")
    print(f"prompt -> result logged  p50 {bus_p50:8.2f} ms   p90 {bus_p90:8.2f} ms")
    print(f"ratio (p50) {bus_p50 / direct_p50:6.1f}x   added {bus_p50 - direct_p50:7.2f} ms")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=30)
    parser.add_argument("--warmup", type=int, default=3)
    asyncio.run(run(parser.parse_args()))


if __name__ == "__main__":
    main()
