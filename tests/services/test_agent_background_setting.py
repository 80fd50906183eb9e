"""A9 ``CLAUDE_CODE_DISABLE_BACKGROUND_TASKS``'s place: ``AGENTBUS_AGENTS__BACKGROUND_TASKS=false`` removes
``run_in_background`` from the Agent tool's schema (A1.2) and refuses a call that sends it anyway."""

from __future__ import annotations

import pytest
import redis.asyncio as aioredis

from agentbus_redis.agents.tool import BACKGROUND_DISABLED, AgentInput
from agentbus_redis.config.settings import Settings
from agentbus_redis.permissions.decide import PermissionContext
from agentbus_redis.streams.names import StreamNames
from agentbus_redis.streams.topology import Topology
from agentbus_redis.subagents.launcher import AgentTool
from agentbus_redis.subagents.setup import agent_setup
from agentbus_redis.tools.tool import ToolContext, ToolError


def agent_tool(background_tasks: bool | None, monkeypatch: pytest.MonkeyPatch) -> AgentTool:
    if background_tasks is not None:
        monkeypatch.setenv("AGENTBUS_AGENTS__BACKGROUND_TASKS", str(background_tasks).lower())
    settings = Settings(_env_file=None)

    async def no_tools() -> list[str]:
        return []

    return AgentTool(
        aioredis.Redis(),  # never connected: definition and validation need no Redis
        Topology(StreamNames(prefix="agentbus:", shards=1)),
        setup=agent_setup(settings.agents, cwd="/work"),
        permissions=PermissionContext(workspace_root="/work"),
        internal_key=b"k" * 32,
        tool_names=no_tools,
    )


def test_a1_2_run_in_background_is_offered_by_default(monkeypatch: pytest.MonkeyPatch) -> None:
    tool = agent_tool(None, monkeypatch)
    assert tool.setup.background_tasks
    assert "run_in_background" in tool.definition().input_schema["properties"]  # type: ignore[operator]


async def test_a9_disabled_background_tasks_remove_the_field_and_refuse_it(monkeypatch: pytest.MonkeyPatch) -> None:
    tool = agent_tool(False, monkeypatch)
    assert "run_in_background" not in tool.definition().input_schema["properties"]  # type: ignore[operator]
    call = AgentInput(description="d", prompt="p", run_in_background=True)
    with pytest.raises(ToolError) as refused:
        await tool.validate_input(call, ToolContext(tool_use_id="t1"))
    assert str(refused.value) == BACKGROUND_DISABLED
    await tool.validate_input(AgentInput(description="d", prompt="p"), ToolContext(tool_use_id="t2"))
