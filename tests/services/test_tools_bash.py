"""Bash with real subprocesses: output, exit codes, progress, caps, timeouts and process-group kills."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from agentbus_redis.tools.tool import ToolContext, ToolError, ToolOutput, ToolProgress
from agentbus_redis.workers.tools.builtin.bash import NO_OUTPUT, BashTool
from agentbus_redis.workers.tools.workspace import Workspace


@pytest.fixture
def workspace(tmp_path: Path) -> Workspace:
    return Workspace.at(tmp_path)


async def run(tool: BashTool, **raw: Any) -> tuple[list[ToolProgress], ToolOutput]:
    parsed = tool.input_model.model_validate(raw)
    ctx = ToolContext(tool_use_id="toolu_1")
    await tool.validate_input(parsed, ctx)
    events = [event async for event in tool.call(parsed, ctx)]
    *progress, output = events
    assert isinstance(output, ToolOutput)
    assert all(isinstance(event, ToolProgress) for event in progress)
    return progress, output  # type: ignore[return-value]


def is_alive(pid: int) -> bool:
    """A process that exists and is not a zombie (containers may not reap orphans)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError):
        return False
    return state not in ("Z", "X")


async def gone(pid: int) -> bool:
    """True once ``pid`` is dead; a killed process may need a moment to be torn down (bounded poll)."""
    for _ in range(1000):
        if not is_alive(pid):
            return True
        await asyncio.sleep(0.01)
    return False


async def wait_for_file(path: Path) -> str:
    while not path.exists() or not path.read_text().strip():
        await asyncio.sleep(0.01)
    return path.read_text().strip()


async def test_runs_in_the_workspace_and_captures_output(workspace: Workspace) -> None:
    _, output = await run(BashTool(workspace), command="pwd; echo hello")
    assert output.content == f"{workspace.root}\nhello"
    assert output.is_error is False
    assert output.tool_use_result == {
        "stdout": f"{workspace.root}\nhello\n",
        "stderr": "",
        "interrupted": False,
        "isImage": False,
    }


async def test_nonzero_exit_is_an_error_with_both_streams(workspace: Workspace) -> None:
    _, output = await run(BashTool(workspace), command="echo out; echo err >&2; exit 3")
    assert output.is_error is True
    assert output.content == "Exit code 3\nout\nerr"
    assert output.tool_use_result == "Error: Exit code 3\nout\nerr"


async def test_no_output_and_stdin_is_closed(workspace: Workspace) -> None:
    _, output = await run(BashTool(workspace), command="cat")
    assert output.content == NO_OUTPUT


async def test_quiet_environment(workspace: Workspace) -> None:
    _, output = await run(BashTool(workspace, env={"PATH": "/usr/bin:/bin"}), command="echo $GIT_PAGER $PATH")
    assert output.content == "cat /usr/bin:/bin"


async def test_streams_bash_progress_while_running(workspace: Workspace) -> None:
    command = "for i in 1 2 3; do echo line$i; sleep 0.05; done"
    progress, output = await run(BashTool(workspace, progress_interval_s=0), command=command)
    assert progress
    assert all(event.data["type"] == "bash_progress" for event in progress)
    assert "".join(str(event.data["output"]) for event in progress) == "line1\nline2\nline3\n"
    assert progress[-1].data["totalLines"] == 3
    assert output.content == "line1\nline2\nline3"


async def test_output_is_capped(workspace: Workspace) -> None:
    _, output = await run(BashTool(workspace, max_output_chars=20), command="seq 1 2000")
    assert isinstance(output.content, str)
    assert output.content.startswith("1\n2\n3\n")
    assert output.content.endswith("lines truncated] ...")
    assert len(output.content) < 100


async def test_timeout_kills_the_whole_process_group(workspace: Workspace) -> None:
    command = "echo $$ > leader; sleep 30 & echo $! > child; echo started; wait"
    _, output = await run(BashTool(workspace, kill_grace_s=0.5), command=command, timeout=300)
    assert output.is_error is True
    assert output.content == "Command timed out after 300ms and was killed.\nstarted"
    assert output.tool_use_result == "Error: Command timed out after 300ms and was killed.\nstarted"
    for name in ("leader", "child"):
        assert await gone(int((workspace.root / name).read_text()))


async def test_finishes_when_a_background_child_keeps_the_pipes(workspace: Workspace) -> None:
    _, output = await run(BashTool(workspace), command="sleep 30 & echo $! > child; echo started", timeout=20_000)
    assert output.is_error is False
    assert output.content == "started"
    assert await gone(int((workspace.root / "child").read_text()))


async def test_cancellation_kills_the_process_group(workspace: Workspace) -> None:
    tool = BashTool(workspace, kill_grace_s=0.5)
    task = asyncio.create_task(run(tool, command="sleep 30 & echo $! > child; echo $$ > leader; wait"))
    leader = int(await wait_for_file(workspace.root / "leader"))
    child = int(await wait_for_file(workspace.root / "child"))
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert await gone(leader)
    assert await gone(child)


async def test_input_checks(workspace: Workspace) -> None:
    with pytest.raises(ToolError, match="run_in_background is not supported"):
        await run(BashTool(workspace), command="ls", run_in_background=True)
    with pytest.raises(ToolError, match="empty"):
        await run(BashTool(workspace), command="  ")


def test_flags(workspace: Workspace) -> None:
    tool = BashTool(workspace)
    parsed = tool.input_model.model_validate({"command": "ls"})
    assert not tool.is_concurrency_safe(parsed)
    assert not tool.is_read_only(parsed)
    assert tool.interrupt_behavior() == "block"
    assert BashTool(workspace, interrupt_behavior="cancel").interrupt_behavior() == "cancel"


PEAK_RSS_PROBE = """
import asyncio, json, resource, sys
from pathlib import Path
from agentbus_redis.workers.tools.builtin.bash import BashTool
from agentbus_redis.tools.tool import ToolContext
from agentbus_redis.workers.tools.workspace import Workspace

async def main() -> None:
    # No progress report during the command: nothing may be kept for one either.
    tool = BashTool(Workspace.at(Path(sys.argv[1])), progress_interval_s=3600)
    ctx = ToolContext(tool_use_id="toolu_1")
    async for _ in tool.call(tool.input_model.model_validate({"command": "echo warm"}), ctx):
        pass
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    events = [event async for event in tool.call(tool.input_model.model_validate({"command": sys.argv[2]}), ctx)]
    growth_kb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before
    print(json.dumps({"growth_kb": growth_kb, "content": events[-1].content}))

asyncio.run(main())
"""


def test_output_is_streamed_into_the_cap_issue_15(workspace: Workspace) -> None:
    """Issue 15: 100 MB of output was buffered in memory (the worker grew by ~180 MB) although the
    result keeps 30k characters. Measured in a fresh process: its peak RSS, before and after."""
    probe = subprocess.run(
        [sys.executable, "-c", PEAK_RSS_PROBE, str(workspace.root), "yes | head -c 100000000"],
        capture_output=True,
        text=True,
        check=True,
    )
    measured = json.loads(probe.stdout)
    assert measured["growth_kb"] < 10 * 1024
    # The truncation format is unchanged: the first 30,000 characters, then the count of lines dropped.
    assert measured["content"] == "y\n" * 14_999 + "y" + "\n\n... [49985000 lines truncated] ..."
