"""Per-session workspaces on disk (made on first use, owned by the sandbox user, removed after the
retention period) and the sandbox's start-up check."""

from __future__ import annotations

import asyncio
import os
from pathlib import Path

import pytest

from agentbus_redis.sandbox.runner import Sandbox, SandboxUnavailable
from agentbus_redis.sandbox.workspaces import SessionWorkspaces
from agentbus_redis.session_ids import InvalidSessionId
from agentbus_redis.workers.tools.app import IdleWorkspaceCleanup
from agentbus_redis.workers.tools.sessions import SessionTools

CHILD = "s-1:agent-a0123456789abcdef"


def test_each_session_gets_its_own_private_directory(tmp_path: Path) -> None:
    workspaces = SessionWorkspaces(tmp_path, "tree")
    first, second = workspaces.for_session("s-1"), workspaces.for_session("s-2")
    assert first == tmp_path.resolve() / "sessions" / "s-1"
    assert second == tmp_path.resolve() / "sessions" / "s-2"
    assert workspaces.for_session(CHILD) == first  # tree: a sub-agent works in its root session's directory
    assert first.stat().st_mode & 0o777 == 0o700
    assert SessionWorkspaces(tmp_path, "session").for_session(CHILD) == tmp_path.resolve() / "sessions" / CHILD
    assert SessionWorkspaces(tmp_path, "shared").for_session("s-1") == tmp_path.resolve()


@pytest.mark.skipif(os.geteuid() != 0, reason="chown needs root")
def test_a_new_workspace_belongs_to_the_sandbox_user(tmp_path: Path) -> None:
    directory = SessionWorkspaces(tmp_path, "session", owner=(65534, 65534)).for_session("s-1")
    assert (directory.stat().st_uid, directory.stat().st_gid) == (65534, 65534)


@pytest.mark.parametrize("bad", ["..", ".", "a/b", "../../etc", ""])
def test_a_bad_session_id_makes_no_directory(tmp_path: Path, bad: str) -> None:
    with pytest.raises(InvalidSessionId):
        SessionWorkspaces(tmp_path, "session").for_session(bad)
    assert not (tmp_path / "sessions").exists() or list((tmp_path / "sessions").iterdir()) == []


def test_idle_workspaces_are_removed_after_the_retention(tmp_path: Path) -> None:
    now = [1_000_000.0]
    workspaces = SessionWorkspaces(tmp_path, "session", clock=lambda: now[0])
    old, fresh = workspaces.for_session("old"), workspaces.for_session("fresh")
    (old / "deep").mkdir()
    (old / "deep" / "f.txt").write_text("x")
    (fresh / "f.txt").write_text("y")
    for path in (old, old / "deep", old / "deep" / "f.txt", fresh):
        os.utime(path, (now[0] - 100, now[0] - 100))
    os.utime(fresh / "f.txt", (now[0] - 10, now[0] - 10))  # a recent change anywhere keeps the workspace
    assert workspaces.remove_idle(50) == ["old"]
    assert not old.exists()
    assert fresh.exists()
    assert SessionWorkspaces(tmp_path, "shared").remove_idle(0) == []


class _FailsOnce(SessionWorkspaces):
    def __init__(self, root: Path) -> None:
        super().__init__(root, "session", clock=lambda: 4_000_000_000.0)  # every workspace is idle
        self.calls = 0

    def remove_idle(self, retention_s: float) -> list[str]:
        self.calls += 1
        if self.calls == 1:
            raise OSError("disk hiccup")
        return super().remove_idle(retention_s)


async def test_the_cleanup_task_outlives_a_failed_pass_and_removes_idle_workspaces(tmp_path: Path) -> None:
    workspaces = _FailsOnce(tmp_path)
    idle = workspaces.for_session("s-idle")
    cleanup = IdleWorkspaceCleanup(workspaces, retention_s=1.0)
    task = cleanup.start()
    try:
        for _ in range(600):  # generous: the machine is shared
            if not idle.exists():
                break
            await asyncio.sleep(0.05)
        else:
            pytest.fail(f"the idle workspace was never removed ({workspaces.calls} passes, {cleanup.errors} failed)")
        assert cleanup.errors == 1
        assert not task.done()  # a failed pass never ends the loop
    finally:
        await cleanup.stop()
    assert task.done()


def test_session_tools_are_confined_to_the_sessions_workspace(tmp_path: Path) -> None:
    tools = SessionTools(SessionWorkspaces(tmp_path, "session"), sandbox=None)
    registry, workspace = tools.for_session("s-1")
    again, _ = tools.for_session("s-1")
    other, other_workspace = tools.for_session("s-2")
    assert again is registry
    assert other is not registry
    assert workspace.root == tmp_path.resolve() / "sessions" / "s-1"
    assert other_workspace.root == tmp_path.resolve() / "sessions" / "s-2"
    bash = registry.get("Bash")
    assert bash is not None
    assert bash.workspace == workspace  # type: ignore[attr-defined]
    assert tools.template().names == ["Read", "Glob", "Grep", "Write", "Edit", "Bash"]


async def test_the_start_check_passes_here(tmp_path: Path) -> None:
    sandbox = Sandbox.for_this_process()
    workspaces = SessionWorkspaces(tmp_path, "session", owner=sandbox.owner)
    assert (await sandbox.check(workspaces.check_dir())).startswith("bubblewrap ")


async def test_tool_workers_starting_together_check_the_same_directory_at_once(tmp_path: Path) -> None:
    """The full suite saw one of two tool workers started together refuse to start: both probes wrote and removed
    the same file in the shared check directory, and the second ``rm`` found it gone."""
    sandbox = Sandbox.for_this_process()
    workspaces = SessionWorkspaces(tmp_path, "session", owner=sandbox.owner)
    versions = await asyncio.gather(*(sandbox.check(workspaces.check_dir()) for _ in range(8)))
    assert all(version.startswith("bubblewrap ") for version in versions)
    assert list(workspaces.check_dir().iterdir()) == []


async def test_a_read_only_path_under_tmp_is_seen_inside_the_sandbox(tmp_path: Path) -> None:
    """The sandbox's /tmp is private, and a read-only path under the host's /tmp (the virtualenv of a checkout in
    /tmp, given to sandboxed MCP servers) is mounted over it, not hidden by it: a clean clone in /tmp had its
    sandboxed MCP servers fail to start, their interpreter out of sight."""
    assert str(tmp_path).startswith("/tmp/"), tmp_path  # pytest's base temp; the case this test is about
    tools = tmp_path / "venv" / "bin"
    tools.mkdir(parents=True)
    (tools / "marker").write_text("seen\n")
    tools.parent.chmod(0o755)
    tools.chmod(0o755)
    (tools / "marker").chmod(0o644)
    sandbox = Sandbox.for_this_process().with_read_only([str(tmp_path / "venv")])
    workspaces = SessionWorkspaces(tmp_path / "root", "session", owner=sandbox.owner)
    workspace = workspaces.for_session("s-1")
    process = await asyncio.create_subprocess_exec(
        *sandbox.argv(workspace, "/bin/bash", f"cat {tools / 'marker'}"),
        env=sandbox.environment(workspace),
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await process.communicate()
    assert process.returncode == 0, err.decode()
    assert out.decode() == "seen\n"


async def test_the_start_check_fails_with_a_broken_bwrap(tmp_path: Path) -> None:
    sandbox = Sandbox.for_this_process(bwrap="/bin/false")
    workspaces = SessionWorkspaces(tmp_path, "session", owner=sandbox.owner)
    with pytest.raises(SandboxUnavailable, match="cannot build a sandbox here"):
        await sandbox.check(workspaces.check_dir())
