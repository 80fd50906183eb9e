"""Write and Edit on real files: Claude Code's texts, the unique-match rule, line endings."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from agentbus_redis.tools.tool import AnyTool, ToolContext, ToolError, ToolOutput
from agentbus_redis.workers.tools.builtin._files import format_size, structured_patch
from agentbus_redis.workers.tools.builtin.edit import FILE_EXISTS, NO_CHANGES, EditTool, ambiguous, not_found
from agentbus_redis.workers.tools.builtin.write import WriteTool
from agentbus_redis.workers.tools.workspace import Workspace


@pytest.fixture
def workspace(tmp_path: Path) -> Workspace:
    return Workspace.at(tmp_path)


async def run(tool: AnyTool, **raw: Any) -> ToolOutput:
    parsed = tool.input_model.model_validate(raw)
    ctx = ToolContext(tool_use_id="toolu_1")
    await tool.validate_input(parsed, ctx)
    [output] = [event async for event in tool.call(parsed, ctx)]
    assert isinstance(output, ToolOutput)
    return output


async def test_write_creates_with_parents_then_updates(workspace: Workspace) -> None:
    target = str(workspace.root / "pkg" / "mod.py")
    created = await run(WriteTool(workspace), file_path=target, content="a = 1\n")
    assert created.content == f"File created successfully at: {target}"
    assert created.tool_use_result == {
        "type": "create",
        "filePath": target,
        "content": "a = 1\n",
        "structuredPatch": [],
        "originalFile": None,
    }
    updated = await run(WriteTool(workspace), file_path=target, content="a = 2\n")
    assert updated.content == f"The file {target} has been updated successfully."
    assert isinstance(updated.tool_use_result, dict)
    assert updated.tool_use_result["type"] == "update"
    assert updated.tool_use_result["originalFile"] == "a = 1\n"
    assert updated.tool_use_result["structuredPatch"] == [
        {"oldStart": 1, "oldLines": 2, "newStart": 1, "newLines": 2, "lines": ["-a = 1", "+a = 2", " "]}
    ]
    assert (workspace.root / "pkg" / "mod.py").read_text() == "a = 2\n"


async def test_write_keeps_content_byte_exact_and_refuses_directories(workspace: Workspace) -> None:
    await run(WriteTool(workspace), file_path="crlf.txt", content="x\r\ny\n")
    assert (workspace.root / "crlf.txt").read_bytes() == b"x\r\ny\n"
    (workspace.root / "d").mkdir()
    with pytest.raises(ToolError, match="is a directory"):
        await run(WriteTool(workspace), file_path="d", content="")


async def test_write_and_edit_refuse_special_files(workspace: Workspace) -> None:
    os.mkfifo(workspace.root / "pipe")
    with pytest.raises(ToolError, match="not a regular file"):
        await run(WriteTool(workspace), file_path="pipe", content="x")
    with pytest.raises(ToolError, match="not a regular file"):
        await run(EditTool(workspace), file_path="pipe", old_string="a", new_string="b")


async def test_edit_replaces_a_unique_match(workspace: Workspace) -> None:
    path = workspace.root / "a.py"
    path.write_text("def f():\n    return 1\n")
    output = await run(EditTool(workspace), file_path=str(path), old_string="return 1", new_string="return 2")
    assert output.content == f"The file {path} has been updated successfully."
    assert path.read_text() == "def f():\n    return 2\n"
    assert isinstance(output.tool_use_result, dict)
    assert output.tool_use_result["oldString"] == "return 1"
    assert output.tool_use_result["newString"] == "return 2"
    assert output.tool_use_result["originalFile"] == "def f():\n    return 1\n"
    assert output.tool_use_result["replaceAll"] is False
    assert output.tool_use_result["userModified"] is False


async def test_edit_error_texts(workspace: Workspace) -> None:
    path = workspace.root / "a.txt"
    path.write_text("x x x\n")
    cases = [
        ({"old_string": "x", "new_string": "x"}, NO_CHANGES),
        ({"old_string": "y", "new_string": "z"}, "String to replace not found in file.\nString: y"),
        ({"old_string": "x", "new_string": "z"}, ambiguous(3, "x")),
        ({"old_string": "", "new_string": "z"}, FILE_EXISTS),
    ]
    for arguments, message in cases:
        with pytest.raises(ToolError) as caught:
            await run(EditTool(workspace), file_path="a.txt", **arguments)
        assert caught.value.message == message
    assert path.read_text() == "x x x\n"
    assert not_found("y") == "String to replace not found in file.\nString: y"
    assert ambiguous(3, "x") == (
        "Found 3 matches of the string to replace, but replace_all is false. To replace all occurrences, set "
        "replace_all to true. To replace only one occurrence, please provide more context to uniquely identify "
        "the instance.\nString: x"
    )
    with pytest.raises(ToolError) as missing:
        await run(EditTool(workspace), file_path="nope.txt", old_string="a", new_string="b")
    assert missing.value.message == f"File does not exist. Note: your current working directory is {workspace.root}."


async def test_edit_replace_all(workspace: Workspace) -> None:
    path = workspace.root / "a.txt"
    path.write_text("x x x\n")
    output = await run(EditTool(workspace), file_path="a.txt", old_string="x", new_string="y", replace_all=True)
    assert output.content == "The file a.txt has been updated. All occurrences were successfully replaced."
    assert path.read_text() == "y y y\n"


async def test_edit_with_empty_old_string_creates_or_fills(workspace: Workspace) -> None:
    await run(EditTool(workspace), file_path="new/file.txt", old_string="", new_string="hello\n")
    assert (workspace.root / "new/file.txt").read_text() == "hello\n"
    (workspace.root / "blank.txt").write_text("  \n")
    await run(EditTool(workspace), file_path="blank.txt", old_string="", new_string="filled\n")
    assert (workspace.root / "blank.txt").read_text() == "filled\n"


async def test_edit_keeps_crlf_line_endings(workspace: Workspace) -> None:
    path = workspace.root / "win.txt"
    path.write_bytes(b"one\r\ntwo\r\nthree\r\n")
    await run(EditTool(workspace), file_path="win.txt", old_string="one\ntwo", new_string="1\n2")
    assert path.read_bytes() == b"1\r\n2\r\nthree\r\n"


async def test_edit_refuses_binary_and_non_utf8(workspace: Workspace) -> None:
    (workspace.root / "b.bin").write_bytes(b"a\x00b")
    (workspace.root / "l1.txt").write_bytes(b"caf\xe9")
    with pytest.raises(ToolError, match="binary"):
        await run(EditTool(workspace), file_path="b.bin", old_string="a", new_string="b")
    with pytest.raises(ToolError, match="not valid UTF-8"):
        await run(EditTool(workspace), file_path="l1.txt", old_string="caf", new_string="x")


def test_structured_patch_and_sizes() -> None:
    assert structured_patch("a\nb\nc", "a\nB\nc") == [
        {"oldStart": 1, "oldLines": 3, "newStart": 1, "newLines": 3, "lines": [" a", "-b", "+B", " c"]}
    ]
    assert structured_patch("same", "same") == []
    assert [format_size(n) for n in (10, 1024, 1536, 3 * 1024 * 1024)] == ["10 bytes", "1KB", "1.5KB", "3MB"]


def test_write_and_edit_are_not_concurrency_safe(workspace: Workspace) -> None:
    for tool, raw in (
        (WriteTool(workspace), {"file_path": "a", "content": ""}),
        (EditTool(workspace), {"file_path": "a", "old_string": "a", "new_string": "b"}),
    ):
        parsed = tool.input_model.model_validate(raw)
        assert not tool.is_concurrency_safe(parsed)  # type: ignore[arg-type]
        assert not tool.is_read_only(parsed)  # type: ignore[arg-type]
