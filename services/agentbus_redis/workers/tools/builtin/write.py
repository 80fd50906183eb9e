"""Write: create or overwrite a text file inside the workspace."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

from pydantic import Field

from agentbus_redis.tools.tool import Tool, ToolContext, ToolError, ToolInput, ToolOutput, ToolProgress
from agentbus_redis.workers.tools.builtin._files import read_text, structured_patch, write_text
from agentbus_redis.workers.tools.workspace import Workspace


class WriteInput(ToolInput):
    file_path: str = Field(
        description="The file to write: an absolute path inside the workspace, or relative to its root"
    )
    content: str = Field(description="The content to write to the file")


class WriteTool(Tool[WriteInput]):
    """Writes ``content`` exactly (UTF-8, no newline translation), creating parent directories.

    Unlike Claude Code, an existing file need not have been Read first: tool workers are stateless,
    so there is no per-session read ledger to consult."""

    name = "Write"
    input_model = WriteInput

    def __init__(self, workspace: Workspace) -> None:
        self.workspace = workspace

    def description(self) -> str:
        return (
            "Writes a file in the workspace.\n\n"
            "Usage:\n"
            "- Overwrites the file if it exists; creates it, and any missing parent directories, if not.\n"
            "- The content is written exactly as given: UTF-8, line endings unchanged.\n"
            "- Prefer Edit to change part of an existing file: it sends only the change.\n"
            "- Do not create documentation files (*.md, README) unless asked to."
        )

    async def validate_input(self, tool_input: WriteInput, ctx: ToolContext) -> None:
        path = self.workspace.resolve(tool_input.file_path)
        if path.is_dir():
            raise ToolError(f"{tool_input.file_path} is a directory; Write needs a file path.")
        if path.exists() and not path.is_file():
            raise ToolError(f"{tool_input.file_path} is not a regular file (a pipe, socket or device).")

    def permission_paths(self, tool_input: WriteInput) -> list[str]:
        return [str(self.workspace.resolve(tool_input.file_path))]

    async def call(self, tool_input: WriteInput, ctx: ToolContext) -> AsyncIterator[ToolProgress | ToolOutput]:
        yield await asyncio.to_thread(self._write, tool_input)

    def _write(self, tool_input: WriteInput) -> ToolOutput:
        path = self.workspace.resolve(tool_input.file_path)
        original = read_text(path, tool_input.file_path) if path.exists() else None
        write_text(path, tool_input.content)
        if original is None:
            message = f"File created successfully at: {tool_input.file_path}"
            kind, patch = "create", []
        else:
            message = f"The file {tool_input.file_path} has been updated successfully."
            kind, patch = "update", structured_patch(original, tool_input.content)
        return ToolOutput(
            message,
            tool_use_result={
                "type": kind,
                "filePath": tool_input.file_path,
                "content": tool_input.content,
                "structuredPatch": patch,  # type: ignore[dict-item]
                "originalFile": original,
            },
        )
