"""Issue 18: ``agentbus tools ls`` run as its own process against a real Redis — the live tool workers, their
tools and the age of their last refresh; ``--json`` with the merged definitions the model is offered."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
import redis.asyncio as aioredis

from agentbus_redis.config.settings import Settings
from agentbus_redis.stores.tool_catalog import ToolCatalogPublisher, epoch_ms
from agentbus_redis.streams.topology import Topology
from agentbus_redis.tools.definitions import ToolDefinition
from agentbus_redis.workers.tools.registry import default_registry
from agentbus_redis.workers.tools.workspace import Workspace
from tests.cli.process import agentbus, cli_env

pytestmark = pytest.mark.integration

TOPOLOGY = Topology(Settings(_env_file=None).names)  # type: ignore[call-arg]
HOUR_MS = 3_600_000


async def publish(
    redis: aioredis.Redis, worker: str, tools: list[ToolDefinition], *, offset_ms: int = 0, pool: str = "default"
) -> None:
    """An entry that lives an hour (a CLI process may take many seconds to start on a loaded machine)."""
    await ToolCatalogPublisher(
        redis,
        TOPOLOGY,
        worker=worker,
        tools=tools,
        pool=pool,
        ttl_s=HOUR_MS / 1000,
        now_ms=lambda: epoch_ms() + offset_ms,
    ).publish()


async def test_tools_ls_lists_live_workers_and_their_tools(
    redis_url: str, aredis: aioredis.Redis, tmp_path: Path
) -> None:
    builtin = default_registry(Workspace.at(tmp_path)).definitions()
    agent = ToolDefinition(name="Agent", description="Launch a new agent", input_schema={"type": "object"})
    await publish(aredis, "tools-host-1-aaaaaa", builtin)
    await publish(aredis, "tools-host-2-bbbbbb", [agent], offset_ms=-2_000, pool="team")
    await publish(aredis, "tools-dead-3-cccccc", builtin, offset_ms=-2 * HOUR_MS)  # expired: not listed
    await aredis.hset(TOPOLOGY.tool_catalog, "garbage", "{")

    listed = agentbus("tools", "ls", cwd=tmp_path, env=cli_env(redis_url))
    assert listed.code == 0, listed.stderr
    assert listed.stderr.startswith("agentbus: catalog field 'garbage' is not a tool catalog entry: ")
    lines = listed.stdout.splitlines()
    assert re.fullmatch(r"worker\s+pool\s+refreshed\s+expires in\s+tools", lines[0])
    assert re.fullmatch(
        r"tools-host-1-aaaaaa\s+default\s+\d+\.\ds ago\s+\d+\.\ds\s+Bash, Edit, Glob, Grep, Read, Write", lines[1]
    )
    age = re.fullmatch(r"tools-host-2-bbbbbb\s+team\s+(\d+\.\d)s ago\s+\d+\.\ds\s+Agent", lines[2])
    assert age is not None, lines[2]
    assert float(age.group(1)) >= 2.0
    assert lines[3] == "2 workers; the model is offered 7 tools: Agent, Bash, Edit, Glob, Grep, Read, Write"
    assert len(lines) == 4

    as_json = agentbus("tools", "ls", "--json", cwd=tmp_path, env=cli_env(redis_url))
    assert as_json.code == 0, as_json.stderr
    body = json.loads(as_json.stdout)
    assert [worker["worker"] for worker in body["workers"]] == ["tools-host-1-aaaaaa", "tools-host-2-bbbbbb"]
    assert body["workers"][1]["tools"] == ["Agent"]
    assert [worker["pool"] for worker in body["workers"]] == ["default", "team"]
    assert body["pools"] == {"Agent": "team", **{tool.name: "default" for tool in builtin}}
    assert body["workers"][1]["age_s"] >= 2.0
    assert [tool["name"] for tool in body["tools"]] == ["Agent", "Bash", "Edit", "Glob", "Grep", "Read", "Write"]
    assert body["tools"][0] == agent.to_wire()
    assert [invalid["worker"] for invalid in body["invalid"]] == ["garbage"]
    assert await aredis.hexists(TOPOLOGY.tool_catalog, "tools-dead-3-cccccc")  # listing never prunes


def test_tools_ls_without_workers_says_so(redis_url: str, tmp_path: Path) -> None:
    outcome = agentbus("tools", "ls", cwd=tmp_path, env=cli_env(redis_url))
    assert (outcome.code, outcome.stdout, outcome.error_line) == (0, "", "agentbus: no live tool workers")
    as_json = agentbus("tools", "ls", "--json", cwd=tmp_path, env=cli_env(redis_url))
    assert json.loads(as_json.stdout) == {"workers": [], "tools": [], "pools": {}, "invalid": []}


def test_tools_ls_with_redis_down_is_one_line(tmp_path: Path) -> None:
    from agentbus_redis.local.redis_server import free_port

    outcome = agentbus("tools", "ls", cwd=tmp_path, env=cli_env(f"redis://127.0.0.1:{free_port()}/0"))
    assert outcome.code != 0
    assert outcome.error_line.startswith("agentbus: cannot reach Redis"), outcome.stderr
