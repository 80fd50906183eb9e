"""Read: a text file as ``cat -n``-style numbered lines (``     1→text``), or an image."""

from __future__ import annotations

import asyncio
import base64
from collections.abc import AsyncIterator
from pathlib import Path

from pydantic import Field

from agentbus_redis.json_types import JsonObject
from agentbus_redis.messages.content import ImageBlock
from agentbus_redis.tools.tool import Tool, ToolContext, ToolError, ToolInput, ToolOutput, ToolProgress
from agentbus_redis.workers.tools.builtin._files import (
    BINARY_EXTENSIONS,
    IMAGE_MEDIA_TYPES,
    SNIFF_BYTES,
    extension,
    format_size,
    looks_binary,
)
from agentbus_redis.workers.tools.workspace import Workspace

EMPTY_FILE_WARNING = "<system-reminder>Warning: the file exists but the contents are empty.</system-reminder>"


class ReadInput(ToolInput):
    file_path: str = Field(
        description="The file to read: an absolute path inside the workspace, or relative to its root"
    )
    offset: int | None = Field(
        default=None,
        ge=0,
        description="The line number to start reading from (1-based). Only give it when the file is too large "
        "to read at once",
    )
    """1-based line to start at (0 and 1 both mean the first line)."""
    limit: int | None = Field(
        default=None,
        gt=0,
        description="The number of lines to read. Only give it when the file is too large to read at once",
    )


def number_lines(lines: list[str], start_line: int) -> str:
    """Claude Code's line-number format: the number right-aligned in 6 columns, then ``→``."""
    return "\n".join(f"{number:>6}→{line}" for number, line in enumerate(lines, start=start_line))


class ReadTool(Tool[ReadInput]):
    """Reads files inside the workspace. Text: at most ``default_limit`` lines unless ``limit`` says
    otherwise, lines longer than ``max_line_chars`` cut; files over ``max_size_bytes`` need
    offset/limit. Images (png/jpg/gif/webp) come back as an image block. Other binaries are refused."""

    name = "Read"
    input_model = ReadInput

    def __init__(
        self,
        workspace: Workspace,
        *,
        max_size_bytes: int = 256 * 1024,
        default_limit: int = 2000,
        max_line_chars: int = 2000,
        max_image_bytes: int = 3_750_000,
    ) -> None:
        self.workspace = workspace
        self.max_size_bytes = max_size_bytes
        self.default_limit = default_limit
        self.max_line_chars = max_line_chars
        self.max_image_bytes = max_image_bytes

    def description(self) -> str:
        return (
            "Reads a file from the workspace.\n\n"
            "Usage:\n"
            "- file_path is an absolute path inside the workspace, or a path relative to the workspace root.\n"
            f"- By default it reads up to {self.default_limit} lines from the start of the file. You can give a "
            "line offset and limit to read part of a long file; files larger than "
            f"{format_size(self.max_size_bytes)} must be read that way (or searched with Grep).\n"
            f"- Lines longer than {self.max_line_chars} characters are cut.\n"
            "- Results are numbered like cat -n: each line is its number, right-aligned, then \u2192, then the "
            "line (the number and \u2192 are not part of the file).\n"
            "- PNG, JPG, GIF and WEBP images (up to "
            f"{format_size(self.max_image_bytes)}) are returned as images you can see. Other binary files are "
            "refused.\n"
            "- It reads files, not directories: list a directory with Glob or with ls through Bash.\n"
            "- Reading an empty file returns a warning in place of its contents.\n"
            "- You can call several tools in one response: read several files that may be useful at once."
        )

    def is_read_only(self, tool_input: ReadInput) -> bool:
        return True

    def is_concurrency_safe(self, tool_input: ReadInput) -> bool:
        return True

    async def validate_input(self, tool_input: ReadInput, ctx: ToolContext) -> None:
        self.workspace.resolve(tool_input.file_path)
        ext = extension(tool_input.file_path)
        if ext in BINARY_EXTENSIONS:
            raise ToolError(
                f"This tool cannot read binary files. The file appears to be a binary .{ext} file. "
                "Please use appropriate tools for binary file analysis."
            )

    def permission_paths(self, tool_input: ReadInput) -> list[str]:
        return [str(self.workspace.resolve(tool_input.file_path))]

    async def call(self, tool_input: ReadInput, ctx: ToolContext) -> AsyncIterator[ToolProgress | ToolOutput]:
        yield await asyncio.to_thread(self._read, tool_input)

    def _read(self, tool_input: ReadInput) -> ToolOutput:
        path = self.workspace.resolve(tool_input.file_path)
        if not path.exists():
            raise ToolError(f"File does not exist. Note: your current working directory is {self.workspace.root}.")
        if path.is_dir():
            raise ToolError(f"{tool_input.file_path} is a directory, not a file. Use Glob or Bash (ls) to list it.")
        if not path.is_file():
            raise ToolError(
                f"{tool_input.file_path} is not a regular file (a pipe, socket or device); it cannot be read."
            )
        ext = extension(path)
        if ext in IMAGE_MEDIA_TYPES:
            return self._read_image(path, tool_input.file_path, IMAGE_MEDIA_TYPES[ext])
        size = path.stat().st_size
        if size > self.max_size_bytes and tool_input.offset is None and tool_input.limit is None:
            raise ToolError(
                f"File content ({format_size(size)}) exceeds maximum allowed size "
                f"({format_size(self.max_size_bytes)}). "
                "Please use offset and limit parameters to read specific portions of the file, "
                "or use the Grep tool to search for specific content."
            )
        return self._read_text(path, tool_input)

    def _read_text(self, path: Path, tool_input: ReadInput) -> ToolOutput:
        start = max(tool_input.offset or 1, 1) - 1
        limit = tool_input.limit or self.default_limit
        selected: list[str] = []
        total = 0
        with path.open("rb") as handle:
            if looks_binary(handle.read(SNIFF_BYTES)):
                raise ToolError(
                    f"This tool cannot read binary files. {tool_input.file_path} appears to be binary. "
                    "Please use appropriate tools for binary file analysis."
                )
            handle.seek(0)
            ended_with_newline = False
            for raw in handle:
                ended_with_newline = raw.endswith(b"\n")
                if start <= total < start + limit:
                    selected.append(raw.decode("utf-8", errors="replace").rstrip("\n").rstrip("\r"))
                total += 1
            if total and ended_with_newline:  # "a\nb\n" has a last, empty line 3 (like split("\n"))
                if start <= total < start + limit:
                    selected.append("")
                total += 1
        lines = [line[: self.max_line_chars] for line in selected]
        file_info: JsonObject = {
            "filePath": tool_input.file_path,
            "content": "\n".join(selected),
            "numLines": len(selected),
            "startLine": start + 1,
            "totalLines": total,
        }
        if lines:
            content = number_lines(lines, start + 1)
        elif total == 0:
            content = EMPTY_FILE_WARNING
        else:
            content = (
                "<system-reminder>Warning: the file exists but is shorter than the provided offset "
                f"({start + 1}). The file has {total} lines.</system-reminder>"
            )
        return ToolOutput(content, tool_use_result={"type": "text", "file": file_info})

    def _read_image(self, path: Path, shown_path: str, media_type: str) -> ToolOutput:
        size = path.stat().st_size
        if size > self.max_image_bytes:
            raise ToolError(
                f"Image {shown_path} is {format_size(size)}, over the {format_size(self.max_image_bytes)} limit."
            )
        data = base64.b64encode(path.read_bytes()).decode("ascii")
        block = ImageBlock(source={"type": "base64", "media_type": media_type, "data": data})
        return ToolOutput(
            [block],
            tool_use_result={"type": "image", "file": {"base64": data, "type": media_type, "originalSize": size}},
        )
