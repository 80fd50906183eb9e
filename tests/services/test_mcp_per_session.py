"""Per-session MCP connections (issue 29) against a real stdio server from PyPI (``mcp-server-time``): a server
marked ``perSession`` gets a connection per session workspace, started on the first call there (its process
running in that workspace), and closed once unused for the idle time. Shared servers get one connection."""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path

import pytest

from agentbus_redis.mcp.config import parse_mcp_config
from agentbus_redis.tools.tool import AnyTool, ToolContext, ToolOutput
from agentbus_redis.workers.tools.mcp import ConnectionPolicy, McpServers

pytestmark = [pytest.mark.slow]

TIME_SERVER = {"command": sys.executable, "args": ["-m", "mcp_server_time", "--local-timezone", "UTC"]}


async def _call(tool: AnyTool, arguments: dict[str, str]) -> ToolOutput:
    events = [event async for event in tool.call(tool.input_model.model_validate(arguments), ToolContext("toolu_1"))]
    output = events[-1]
    assert isinstance(output, ToolOutput)
    return output


async def _connected(servers: McpServers) -> None:
    async with asyncio.timeout(60):
        while any(connection.state != "connected" for connection in servers.listing.values()):
            await asyncio.sleep(0.05)


def _tool(servers: McpServers, workspace: Path, name: str) -> AnyTool:
    (tool,) = [tool for tool in servers.source(workspace).tools() if tool.name == name]
    return tool


async def test_a_per_session_server_has_a_connection_per_workspace_closed_when_idle(tmp_path: Path) -> None:
    config = {"mcpServers": {"shared": TIME_SERVER, "own": {**TIME_SERVER, "agentbus": {"perSession": True}}}}
    servers = McpServers(
        parse_mcp_config(json.dumps(config), source="test", env={}).mcp_servers,
        root=tmp_path,
        policy=ConnectionPolicy(ping_interval_s=0.5),
        max_output_chars=10_000,
        session_idle_s=0.5,
    )
    first, second = tmp_path / "sessions" / "a", tmp_path / "sessions" / "b"
    first.mkdir(parents=True)
    second.mkdir(parents=True)
    servers.start()
    try:
        await _connected(servers)
        for workspace in (first, second, first):
            shared = await _call(_tool(servers, workspace, "mcp__shared__get_current_time"), {"timezone": "UTC"})
            own = await _call(_tool(servers, workspace, "mcp__own__get_current_time"), {"timezone": "Asia/Tokyo"})
            assert not shared.is_error
            assert isinstance(own.content, str)
            assert json.loads(own.content)["timezone"] == "Asia/Tokyo"
        statuses = {status.name: status for status in servers.statuses()}
        assert statuses["own"].session_connections == 2  # one per workspace, the first reused
        assert statuses["shared"].session_connections == 0
        assert sorted(connection.cwd for connection in servers._per_session.values()) == [first, second]
        await asyncio.sleep(0.6)
        assert await servers.close_idle() == 2
        assert {status.name: status.session_connections for status in servers.statuses()} == {"shared": 0, "own": 0}
    finally:
        await servers.stop()
