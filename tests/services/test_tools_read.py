"""Read: numbered lines like Claude Code (``     1→text``), offset/limit, guards (R8.1 texts)."""

from __future__ import annotations

import base64
from pathlib import Path
from typing import Any

import pytest

from agentbus_redis.messages.content import ImageBlock
from agentbus_redis.tools.tool import ToolContext, ToolError, ToolOutput
from agentbus_redis.workers.tools.builtin.read import EMPTY_FILE_WARNING, ReadTool, number_lines
from agentbus_redis.workers.tools.workspace import Workspace


@pytest.fixture
def workspace(tmp_path: Path) -> Workspace:
    return Workspace.at(tmp_path)


async def read(tool: ReadTool, **raw: Any) -> ToolOutput:
    parsed = tool.input_model.model_validate(raw)
    ctx = ToolContext(tool_use_id="toolu_1")
    await tool.validate_input(parsed, ctx)
    events = [event async for event in tool.call(parsed, ctx)]
    assert len(events) == 1
    assert isinstance(events[0], ToolOutput)
    return events[0]


def test_number_lines_format() -> None:
    assert number_lines(["a", "b"], 9) == "     9→a\n    10→b"
    assert number_lines(["x"], 123456) == "123456→x"


async def test_reads_numbered_lines_and_result_shape(workspace: Workspace) -> None:
    (workspace.root / "a.py").write_text("import os\n\nprint(os)\n")
    output = await read(ReadTool(workspace), file_path=str(workspace.root / "a.py"))
    assert output.content == "     1→import os\n     2→\n     3→print(os)\n     4→"
    assert output.is_error is False
    assert output.tool_use_result == {
        "type": "text",
        "file": {
            "filePath": str(workspace.root / "a.py"),
            "content": "import os\n\nprint(os)\n",
            "numLines": 4,
            "startLine": 1,
            "totalLines": 4,
        },
    }


async def test_offset_and_limit_select_lines(workspace: Workspace) -> None:
    (workspace.root / "n.txt").write_text("".join(f"line{index}\n" for index in range(1, 11)))
    output = await read(ReadTool(workspace), file_path="n.txt", offset=3, limit=2)
    assert output.content == "     3→line3\n     4→line4"
    assert (await read(ReadTool(workspace), file_path="n.txt", offset=0, limit=1)).content == "     1→line1"
    capped = await read(ReadTool(workspace, default_limit=3), file_path="n.txt")
    assert capped.content == "     1→line1\n     2→line2\n     3→line3"


async def test_crlf_and_long_lines(workspace: Workspace) -> None:
    (workspace.root / "w.txt").write_bytes(b"a\r\n" + b"x" * 50 + b"\r\n")
    output = await read(ReadTool(workspace, max_line_chars=10), file_path="w.txt")
    assert output.content == "     1→a\n     2→xxxxxxxxxx\n     3→"


async def test_empty_file_and_offset_past_the_end(workspace: Workspace) -> None:
    (workspace.root / "empty.txt").write_text("")
    (workspace.root / "short.txt").write_text("one\ntwo")
    assert (await read(ReadTool(workspace), file_path="empty.txt")).content == EMPTY_FILE_WARNING
    past = await read(ReadTool(workspace), file_path="short.txt", offset=10)
    assert past.content == (
        "<system-reminder>Warning: the file exists but is shorter than the provided offset (10). "
        "The file has 2 lines.</system-reminder>"
    )


async def test_missing_file_and_directory(workspace: Workspace) -> None:
    with pytest.raises(ToolError) as missing:
        await read(ReadTool(workspace), file_path="nope.txt")
    assert missing.value.message == f"File does not exist. Note: your current working directory is {workspace.root}."
    (workspace.root / "d").mkdir()
    with pytest.raises(ToolError, match="is a directory"):
        await read(ReadTool(workspace), file_path="d")


async def test_size_guard_needs_offset_or_limit(workspace: Workspace) -> None:
    (workspace.root / "big.txt").write_text("0123456789\n" * 200)
    tool = ReadTool(workspace, max_size_bytes=1024)
    with pytest.raises(ToolError) as caught:
        await read(tool, file_path="big.txt")
    assert caught.value.message.startswith("File content (2.1KB) exceeds maximum allowed size (1KB).")
    assert (await read(tool, file_path="big.txt", limit=1)).content == "     1→0123456789"


async def test_binary_guards(workspace: Workspace) -> None:
    (workspace.root / "lib.so").write_bytes(b"\x7fELF")
    (workspace.root / "data.txt").write_bytes(b"abc\x00def")
    with pytest.raises(ToolError) as by_extension:
        await read(ReadTool(workspace), file_path="lib.so")
    assert by_extension.value.message == (
        "This tool cannot read binary files. The file appears to be a binary .so file. "
        "Please use appropriate tools for binary file analysis."
    )
    with pytest.raises(ToolError, match="appears to be binary"):
        await read(ReadTool(workspace), file_path="data.txt")


async def test_images_come_back_as_image_blocks(workspace: Workspace) -> None:
    png = b"\x89PNG\r\n\x1a\n" + b"\x00" * 16
    (workspace.root / "pic.png").write_bytes(png)
    output = await read(ReadTool(workspace), file_path="pic.png")
    assert isinstance(output.content, list)
    [block] = output.content
    assert isinstance(block, ImageBlock)
    assert block.source == {"type": "base64", "media_type": "image/png", "data": base64.b64encode(png).decode()}
    with pytest.raises(ToolError, match="over the"):
        await read(ReadTool(workspace, max_image_bytes=4), file_path="pic.png")


def test_read_is_read_only_and_concurrency_safe(workspace: Workspace) -> None:
    tool = ReadTool(workspace)
    parsed = tool.input_model.model_validate({"file_path": "x"})
    assert tool.is_read_only(parsed)
    assert tool.is_concurrency_safe(parsed)
    assert tool.interrupt_behavior() == "block"
