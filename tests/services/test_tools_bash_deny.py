"""Issue 15, "Bash deny rules are bypassed", end to end: each of the twelve commands that removed the
file under ``AGENTBUS_TOOLS__DENY=["Bash(rm:*)"]`` goes through the tool executor with the real Bash
tool against a real temp workspace; the file must survive and the result is the deny text."""

from __future__ import annotations

from pathlib import Path

import pytest

from agentbus_redis.clock import FixedClock
from agentbus_redis.ids import SequentialIds
from agentbus_redis.messages.constants import REJECT_MESSAGE
from agentbus_redis.messages.content import ToolResultBlock, ToolUseBlock
from agentbus_redis.messages.kinds import UserMessage
from agentbus_redis.permissions.decide import PermissionContext
from agentbus_redis.workers.tools.builtin import builtin_tools
from agentbus_redis.workers.tools.executor import execute_tool_uses
from agentbus_redis.workers.tools.registry import ToolRegistry
from agentbus_redis.workers.tools.workspace import Workspace
from tests.shared.bash_cases import ISSUE_15_VARIANTS, RUN_TIME_PROGRAM


async def run_bash(workspace: Workspace, command: str, context: PermissionContext) -> ToolResultBlock:
    messages = [
        message
        async for message in execute_tool_uses(
            [ToolUseBlock(id="toolu_1", name="Bash", input={"command": command})],
            assistant_uuid="aaaaaaaa-0000-4000-8000-000000000001",
            registry=ToolRegistry(builtin_tools(workspace)),
            permissions=context,
            clock=FixedClock(),
            ids=SequentialIds(),
        )
    ]
    [reply] = [message for message in messages if isinstance(message, UserMessage)]
    block = reply.blocks[0]
    assert isinstance(block, ToolResultBlock)
    return block


@pytest.mark.parametrize("settings", [{"mode": "bypassPermissions"}, {"allow": ["Bash"]}], ids=["bypass", "allow-Bash"])
@pytest.mark.parametrize("command", ISSUE_15_VARIANTS)
async def test_issue_15_none_of_the_twelve_variants_runs(
    tmp_path: Path, command: str, settings: dict[str, object]
) -> None:
    (tmp_path / "x").write_text("keep me")
    workspace = Workspace.at(tmp_path)
    context = PermissionContext.from_settings(workspace_root=str(workspace.root), deny=["Bash(rm:*)"], **settings)  # type: ignore[arg-type]
    block = await run_bash(workspace, command, context)
    assert (tmp_path / "x").read_text() == "keep me"
    assert block.is_error is True
    expected = (
        REJECT_MESSAGE
        if command == RUN_TIME_PROGRAM
        else f"Permission to use Bash with command {command} has been denied."
    )
    assert block.content == expected


async def test_commands_the_rule_does_not_name_still_run(tmp_path: Path) -> None:
    (tmp_path / "x").write_text("keep me")
    workspace = Workspace.at(tmp_path)
    context = PermissionContext.from_settings(workspace_root=str(workspace.root), deny=["Bash(rm:*)"], allow=["Bash"])
    block = await run_bash(workspace, "echo $(cat x) && bash -c 'ls x' && command -v rm >/dev/null", context)
    assert (block.is_error, block.content) == (None, "keep me\nx")
