"""File tools are confined to the workspace root: ``../`` escapes, absolute paths outside and
symlinks pointing outside give an is_error result and never touch the target."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from agentbus_redis.clock import FixedClock
from agentbus_redis.ids import SequentialIds
from agentbus_redis.messages.content import ToolResultBlock, ToolUseBlock
from agentbus_redis.messages.kinds import UserMessage
from agentbus_redis.permissions.decide import PermissionContext
from agentbus_redis.tools.tool import ToolError
from agentbus_redis.workers.tools.executor import execute_tool_uses
from agentbus_redis.workers.tools.registry import default_registry
from agentbus_redis.workers.tools.workspace import PathOutsideWorkspace, Workspace


@pytest.fixture
def layout(tmp_path: Path) -> tuple[Workspace, Path]:
    root = tmp_path / "ws"
    outside = tmp_path / "outside"
    root.mkdir()
    outside.mkdir()
    (outside / "secret.txt").write_text("top secret\n")
    (root / "inside.txt").write_text("hello\n")
    (root / "link_out").symlink_to(outside / "secret.txt")
    (root / "dir_out").symlink_to(outside, target_is_directory=True)
    (root / "link_in").symlink_to(root / "inside.txt")
    (root / "dangling_out").symlink_to(outside / "new.txt")
    return Workspace.at(root), outside


def test_resolve_accepts_paths_inside(layout: tuple[Workspace, Path]) -> None:
    workspace, _ = layout
    root = workspace.root
    assert workspace.resolve("inside.txt") == root / "inside.txt"
    assert workspace.resolve(str(root / "inside.txt")) == root / "inside.txt"
    assert workspace.resolve("sub/../inside.txt") == root / "inside.txt"
    assert workspace.resolve("link_in") == root / "inside.txt"
    assert workspace.resolve("new/dir/file.txt") == root / "new/dir/file.txt"
    assert workspace.resolve(".") == root


@pytest.mark.parametrize(
    "raw",
    [
        "../outside/secret.txt",
        "sub/../../outside/secret.txt",
        "link_out",
        "dir_out/secret.txt",
        "dangling_out",
        "/etc/passwd",
        "~/x",
    ],
)
def test_resolve_rejects_escapes(layout: tuple[Workspace, Path], raw: str) -> None:
    workspace, _ = layout
    with pytest.raises(PathOutsideWorkspace) as caught:
        workspace.resolve(raw)
    assert "outside the workspace" in caught.value.message
    assert isinstance(caught.value, ToolError)


def test_resolve_rejects_empty_and_nul(layout: tuple[Workspace, Path]) -> None:
    workspace, _ = layout
    for raw in ("", "  ", "a\x00b"):
        with pytest.raises(ToolError):
            workspace.resolve(raw)


async def run(workspace: Workspace, calls: list[tuple[str, dict[str, object]]]) -> list[UserMessage]:
    permissions = PermissionContext(workspace_root=str(workspace.root), mode="bypassPermissions")
    blocks = [ToolUseBlock(id=f"toolu_{index}", name=name, input=args) for index, (name, args) in enumerate(calls)]
    messages = [
        message
        async for message in execute_tool_uses(
            blocks,
            assistant_uuid="a-1",
            registry=default_registry(workspace),
            permissions=permissions,
            clock=FixedClock(),
            ids=SequentialIds(),
        )
    ]
    return [message for message in messages if isinstance(message, UserMessage)]


def result_of(message: UserMessage) -> ToolResultBlock:
    block = message.blocks[0]
    assert isinstance(block, ToolResultBlock)
    return block


async def test_file_tools_never_touch_targets_outside(layout: tuple[Workspace, Path]) -> None:
    workspace, outside = layout
    secret = outside / "secret.txt"
    before = (secret.read_text(), secret.stat().st_mtime_ns)
    calls: list[tuple[str, dict[str, object]]] = [
        ("Read", {"file_path": "../outside/secret.txt"}),
        ("Read", {"file_path": str(secret)}),
        ("Read", {"file_path": "link_out"}),
        ("Write", {"file_path": "../outside/secret.txt", "content": "pwned"}),
        ("Write", {"file_path": "dangling_out", "content": "pwned"}),
        ("Write", {"file_path": "dir_out/planted.txt", "content": "pwned"}),
        ("Edit", {"file_path": "link_out", "old_string": "top", "new_string": "pwned"}),
        ("Glob", {"pattern": "*", "path": "dir_out"}),
        ("Glob", {"pattern": "../outside/*"}),
        ("Glob", {"pattern": str(outside / "*")}),
        ("Grep", {"pattern": "secret", "path": "../outside"}),
    ]
    messages = await run(workspace, calls)
    assert len(messages) == len(calls)
    for message, (name, _) in zip(messages, calls, strict=True):
        result = result_of(message)
        assert result.is_error is True, name
        assert isinstance(result.content, str)
        assert "top secret" not in result.content
        assert result.content.startswith("<tool_use_error>")
    assert (secret.read_text(), secret.stat().st_mtime_ns) == before
    assert not (outside / "new.txt").exists()
    assert not (outside / "planted.txt").exists()


async def test_outside_error_text_names_path_and_root(layout: tuple[Workspace, Path]) -> None:
    workspace, outside = layout
    [message] = await run(workspace, [("Read", {"file_path": "../outside/secret.txt"})])
    assert result_of(message).content == (
        f"<tool_use_error>Path ../outside/secret.txt resolves to {outside / 'secret.txt'}, which is outside the "
        f"workspace {workspace.root}. File tools can only access files inside the workspace.</tool_use_error>"
    )
    assert message.tool_use_result == (
        f"Error: Path ../outside/secret.txt resolves to {outside / 'secret.txt'}, which is outside the workspace "
        f"{workspace.root}. File tools can only access files inside the workspace."
    )


async def test_symlink_inside_the_workspace_works(layout: tuple[Workspace, Path]) -> None:
    workspace, _ = layout
    [message] = await run(workspace, [("Read", {"file_path": "link_in"})])
    assert result_of(message).content == "     1→hello\n     2→"


async def test_search_tools_skip_links_out_and_special_files(layout: tuple[Workspace, Path]) -> None:
    """Glob/Grep list and read only regular files really inside: a link to an outside file is
    neither listed nor read, symlinked directories are not entered, a FIFO never blocks a read."""
    workspace, _ = layout
    os.mkfifo(workspace.root / "pipe")
    messages = await run(
        workspace,
        [
            ("Glob", {"pattern": "**/*"}),
            ("Grep", {"pattern": "secret|hello", "output_mode": "content"}),
            ("Grep", {"pattern": ".", "output_mode": "count"}),
            ("Read", {"file_path": "pipe"}),
        ],
    )
    # one concurrent batch: results arrive in completion order, so look them up by id
    by_id = {result_of(message).tool_use_id: result_of(message) for message in messages}
    globbed, grepped, counted, fifo = (by_id[f"toolu_{index}"] for index in range(4))
    listed = str(globbed.content).splitlines()
    assert sorted(listed) == [str(workspace.root / "inside.txt"), str(workspace.root / "link_in")]
    assert grepped.content == f"{workspace.root / 'inside.txt'}:1:hello\n{workspace.root / 'link_in'}:1:hello"
    assert "pipe" not in str(counted.content)
    assert fifo.content == (
        "<tool_use_error>pipe is not a regular file (a pipe, socket or device); it cannot be read.</tool_use_error>"
    )
