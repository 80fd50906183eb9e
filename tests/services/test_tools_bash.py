"""Bash with real subprocesses: output, exit codes, progress, caps, timeouts and process-group kills — each
test run twice, unsandboxed and under the worker's bubblewrap sandbox."""

from __future__ import annotations

import asyncio
import functools
import json
import os
import subprocess
import sys
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from agentbus_redis.sandbox.runner import Sandbox
from agentbus_redis.tools.tool import ToolContext, ToolError, ToolOutput, ToolProgress
from agentbus_redis.workers.tools.builtin.bash import NO_OUTPUT, BashTool
from agentbus_redis.workers.tools.workspace import Workspace


@pytest.fixture(scope="module")
def sandbox() -> Sandbox:
    return Sandbox.for_this_process()


@pytest.fixture(params=["unsandboxed", "sandboxed"])
def sandboxed(request: pytest.FixtureRequest) -> bool:
    return bool(request.param == "sandboxed")


@pytest.fixture
def workspace(tmp_path: Path, sandboxed: bool, sandbox: Sandbox) -> Workspace:
    if sandboxed and sandbox.owner is not None:  # a root worker's commands run as an unprivileged user
        os.chown(tmp_path, *sandbox.owner)
    return Workspace.at(tmp_path)


@pytest.fixture
def Bash(sandboxed: bool, sandbox: Sandbox) -> Callable[..., BashTool]:
    """``BashTool``, in the sandbox or not (the test's parameter)."""
    return functools.partial(BashTool, sandbox=sandbox if sandboxed else None)


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


def processes_with(token: str) -> list[int]:
    """Live processes of this machine whose command line holds ``token`` (a sandboxed command's own pids
    are those of its PID namespace: it is found from outside by what it runs)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            if token.encode() in (entry / "cmdline").read_bytes() and is_alive(int(entry.name)):
                found.append(int(entry.name))
        except OSError:
            continue
    return found


async def all_gone(token: str) -> bool:
    """True once no process holding ``token`` in its command line is alive (bounded poll)."""
    for _ in range(1000):
        if not processes_with(token):
            return True
        await asyncio.sleep(0.01)
    return False


def sleeper() -> tuple[str, str]:
    """A ``sleep`` command of a duration no other process uses (its marker): ``sleep 30.<digits>``."""
    marker = f"30.{uuid.uuid4().int % 10**9:09d}"
    return f"sleep {marker}", marker


async def wait_for_file(path: Path) -> str:
    while not path.exists() or not path.read_text().strip():
        await asyncio.sleep(0.01)
    return path.read_text().strip()


async def test_runs_in_the_workspace_and_captures_output(workspace: Workspace, Bash: Callable[..., BashTool]) -> None:
    _, output = await run(Bash(workspace), command="pwd; echo hello")
    assert output.content == f"{workspace.root}\nhello"
    assert output.is_error is False
    assert output.tool_use_result == {
        "stdout": f"{workspace.root}\nhello\n",
        "stderr": "",
        "interrupted": False,
        "isImage": False,
    }


async def test_nonzero_exit_is_an_error_with_both_streams(workspace: Workspace, Bash: Callable[..., BashTool]) -> None:
    _, output = await run(Bash(workspace), command="echo out; echo err >&2; exit 3")
    assert output.is_error is True
    assert output.content == "Exit code 3\nout\nerr"
    assert output.tool_use_result == "Error: Exit code 3\nout\nerr"


async def test_no_output_and_stdin_is_closed(workspace: Workspace, Bash: Callable[..., BashTool]) -> None:
    _, output = await run(Bash(workspace), command="cat")
    assert output.content == NO_OUTPUT


async def test_quiet_environment(workspace: Workspace, Bash: Callable[..., BashTool]) -> None:
    _, output = await run(Bash(workspace, env={"PATH": "/usr/bin:/bin"}), command="echo $GIT_PAGER $PATH")
    assert output.content == "cat /usr/bin:/bin"


async def test_streams_bash_progress_while_running(workspace: Workspace, Bash: Callable[..., BashTool]) -> None:
    command = "for i in 1 2 3; do echo line$i; sleep 0.05; done"
    progress, output = await run(Bash(workspace, progress_interval_s=0), command=command)
    assert progress
    assert all(event.data["type"] == "bash_progress" for event in progress)
    assert "".join(str(event.data["output"]) for event in progress) == "line1\nline2\nline3\n"
    assert progress[-1].data["totalLines"] == 3
    assert output.content == "line1\nline2\nline3"


async def test_output_is_capped(workspace: Workspace, Bash: Callable[..., BashTool]) -> None:
    _, output = await run(Bash(workspace, max_output_chars=20), command="seq 1 2000")
    assert isinstance(output.content, str)
    assert output.content.startswith("1\n2\n3\n")
    assert output.content.endswith("lines truncated] ...")
    assert len(output.content) < 100


async def test_timeout_kills_the_whole_process_group(workspace: Workspace, Bash: Callable[..., BashTool]) -> None:
    sleep, marker = sleeper()  # the leader's command line holds the marker too
    command = f"{sleep} & echo started; wait"
    _, output = await run(Bash(workspace, kill_grace_s=0.5), command=command, timeout=300)
    assert output.is_error is True
    assert output.content == "Command timed out after 300ms and was killed.\nstarted"
    assert output.tool_use_result == "Error: Command timed out after 300ms and was killed.\nstarted"
    assert await all_gone(marker)


async def test_finishes_when_a_background_child_keeps_the_pipes(
    workspace: Workspace, Bash: Callable[..., BashTool]
) -> None:
    sleep, marker = sleeper()
    _, output = await run(Bash(workspace), command=f"{sleep} & echo started", timeout=20_000)
    assert output.is_error is False
    assert output.content == "started"
    assert await all_gone(marker)


async def test_cancellation_kills_the_process_group(workspace: Workspace, Bash: Callable[..., BashTool]) -> None:
    tool = Bash(workspace, kill_grace_s=0.5)
    sleep, marker = sleeper()
    task = asyncio.create_task(run(tool, command=f"{sleep} & echo $! > child; wait"))
    await wait_for_file(workspace.root / "child")
    assert processes_with(marker)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert await all_gone(marker)


async def test_input_checks(workspace: Workspace, Bash: Callable[..., BashTool]) -> None:
    with pytest.raises(ToolError, match="run_in_background is not supported"):
        await run(Bash(workspace), command="ls", run_in_background=True)
    with pytest.raises(ToolError, match="empty"):
        await run(Bash(workspace), command="  ")


def test_flags(workspace: Workspace, Bash: Callable[..., BashTool]) -> None:
    tool = Bash(workspace)
    parsed = tool.input_model.model_validate({"command": "ls"})
    assert not tool.is_concurrency_safe(parsed)
    assert not tool.is_read_only(parsed)
    assert tool.interrupt_behavior() == "block"
    assert Bash(workspace, interrupt_behavior="cancel").interrupt_behavior() == "cancel"


PEAK_RSS_PROBE = """
import asyncio, json, resource, sys
from pathlib import Path
from agentbus_redis.workers.tools.builtin.bash import BashTool
from agentbus_redis.tools.tool import ToolContext
from agentbus_redis.workers.tools.workspace import Workspace
from agentbus_redis.sandbox.runner import Sandbox

async def main() -> None:
    # No progress report during the command: nothing may be kept for one either.
    sandbox = Sandbox.for_this_process() if sys.argv[3] == "sandboxed" else None
    tool = BashTool(Workspace.at(Path(sys.argv[1])), progress_interval_s=3600, sandbox=sandbox)
    ctx = ToolContext(tool_use_id="toolu_1")
    async for _ in tool.call(tool.input_model.model_validate({"command": "echo warm"}), ctx):
        pass
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    events = [event async for event in tool.call(tool.input_model.model_validate({"command": sys.argv[2]}), ctx)]
    growth_kb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before
    print(json.dumps({"growth_kb": growth_kb, "content": events[-1].content}))

asyncio.run(main())
"""


def test_output_is_streamed_into_the_cap_issue_15(workspace: Workspace, sandboxed: bool) -> None:
    """Issue 15: 100 MB of output was buffered in memory (the worker grew by ~180 MB) although the
    result keeps 30k characters. Measured in a fresh process: its peak RSS, before and after."""
    probe = subprocess.run(
        [
            sys.executable,
            "-c",
            PEAK_RSS_PROBE,
            str(workspace.root),
            "yes | head -c 100000000",
            "sandboxed" if sandboxed else "unsandboxed",
        ],
        capture_output=True,
        text=True,
        check=True,
    )
    measured = json.loads(probe.stdout)
    assert measured["growth_kb"] < 10 * 1024
    # The truncation format is unchanged: the first 30,000 characters, then the count of lines dropped.
    assert measured["content"] == "y\n" * 14_999 + "y" + "\n\n... [49985000 lines truncated] ..."


async def test_no_descriptor_of_the_worker_is_inherited(workspace: Workspace, Bash: Callable[..., BashTool]) -> None:
    """uvloop (the workers' loop) lets a child inherit descriptors whatever ``close_fds`` says: the
    worker's Redis connections would reach the command. Here under the loop the worker runs."""
    import uvloop

    leaked_read, leaked_write = os.pipe()
    os.set_inheritable(leaked_read, True)

    async def listing() -> ToolOutput:
        return (await run(Bash(workspace), command="ls /proc/self/fd"))[1]

    try:
        output = await asyncio.get_running_loop().run_in_executor(None, uvloop.run, listing())
    finally:
        os.close(leaked_read)
        os.close(leaked_write)
    assert sorted(str(output.content).split()) == ["0", "1", "2", "3"]  # stdio and ls's own listing


async def test_the_workspace_is_reachable_by_its_absolute_path(
    workspace: Workspace, Bash: Callable[..., BashTool]
) -> None:
    """The paths the file tools report work in commands too (inside the sandbox the workspace is mounted at
    the same path, its parents searchable)."""
    (workspace.root / "note.txt").write_text("hello\n")
    _, output = await run(Bash(workspace), command=f"cat {workspace.root}/note.txt; cd / && ls {workspace.root}")
    assert output.content == "hello\nnote.txt"


RUN_UNTIL_KILLED = """
import sys
from pathlib import Path
import uvloop
from agentbus_redis.workers.tools.builtin.bash import BashTool
from agentbus_redis.tools.tool import ToolContext
from agentbus_redis.workers.tools.workspace import Workspace
from agentbus_redis.sandbox.runner import Sandbox

async def main() -> None:
    sandbox = Sandbox.for_this_process() if sys.argv[3] == "sandboxed" else None
    tool = BashTool(Workspace.at(Path(sys.argv[1])), sandbox=sandbox)
    async for _ in tool.call(tool.input_model.model_validate({"command": sys.argv[2]}), ToolContext(tool_use_id="t")):
        pass

uvloop.run(main())
"""


async def test_a_killed_worker_takes_its_commands_with_it(workspace: Workspace, sandboxed: bool) -> None:
    """SIGKILL leaves a worker no time to stop what it runs: a command and its children, sandboxed (bubblewrap's
    ``--die-with-parent``) or not (the stdin lifeline, ``dying_with_worker_argv``), die with it."""
    sleep, marker = sleeper()
    worker = subprocess.Popen(
        [
            sys.executable,
            "-c",
            RUN_UNTIL_KILLED,
            str(workspace.root),
            f"{sleep} & echo $! > child; ( {sleep} ) & wait",
            "sandboxed" if sandboxed else "unsandboxed",
        ]
    )
    try:
        await wait_for_file(workspace.root / "child")
        assert processes_with(marker)
    finally:
        worker.kill()
        worker.wait()
    assert await all_gone(marker)
