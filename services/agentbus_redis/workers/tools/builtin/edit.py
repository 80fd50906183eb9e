"""Edit: replace an exact string in a text file (Claude Code's unique-match rule and texts)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

from pydantic import Field

from agentbus_redis.tools.tool import Tool, ToolContext, ToolError, ToolInput, ToolOutput, ToolProgress
from agentbus_redis.workers.tools.builtin._files import read_text, structured_patch, write_text
from agentbus_redis.workers.tools.workspace import Workspace

NO_CHANGES = "No changes to make: old_string and new_string are exactly the same."
FILE_EXISTS = "Cannot create new file - file already exists."


def not_found(old_string: str) -> str:
    return f"String to replace not found in file.\nString: {old_string}"


def ambiguous(matches: int, old_string: str) -> str:
    return (
        f"Found {matches} matches of the string to replace, but replace_all is false. To replace all "
        "occurrences, set replace_all to true. To replace only one occurrence, please provide more context "
        f"to uniquely identify the instance.\nString: {old_string}"
    )


class EditInput(ToolInput):
    file_path: str = Field(
        description="The file to modify: an absolute path inside the workspace, or relative to its root"
    )
    old_string: str = Field(description="The text to replace")
    new_string: str = Field(description="The text to replace it with (must be different from old_string)")
    replace_all: bool = Field(default=False, description="Replace every occurrence of old_string (default false)")


class EditTool(Tool[EditInput]):
    """``old_string`` must occur exactly once unless ``replace_all``; an empty ``old_string`` creates
    a missing (or fills an empty) file. A file with CRLF line endings is matched with LF strings
    and written back with CRLF. No read-before-edit ledger (stateless workers, see Write)."""

    name = "Edit"
    input_model = EditInput

    def __init__(self, workspace: Workspace) -> None:
        self.workspace = workspace

    def description(self) -> str:
        return (
            "Performs exact string replacements in a file in the workspace.\n\n"
            "Usage:\n"
            "- old_string must match the file's text exactly, indentation included. Text copied from Read "
            "output must leave out the line prefix (the line number and \u2192).\n"
            "- The edit fails if old_string occurs more than once: give more surrounding context to make it "
            "unique, or set replace_all to change every occurrence (e.g. to rename a variable).\n"
            "- The edit fails if old_string is not found, or if it equals new_string.\n"
            "- An empty old_string creates a new file (or fills an empty one) with new_string.\n"
            "- In a file with CRLF line endings, match with LF line endings: the file keeps its CRLF endings."
        )

    async def validate_input(self, tool_input: EditInput, ctx: ToolContext) -> None:
        path = self.workspace.resolve(tool_input.file_path)
        if tool_input.old_string == tool_input.new_string:
            raise ToolError(NO_CHANGES)
        if path.is_dir():
            raise ToolError(f"{tool_input.file_path} is a directory; Edit needs a file path.")
        if path.exists() and not path.is_file():
            raise ToolError(f"{tool_input.file_path} is not a regular file (a pipe, socket or device).")

    def permission_paths(self, tool_input: EditInput) -> list[str]:
        return [str(self.workspace.resolve(tool_input.file_path))]

    async def call(self, tool_input: EditInput, ctx: ToolContext) -> AsyncIterator[ToolProgress | ToolOutput]:
        yield await asyncio.to_thread(self._edit, tool_input)

    def _edit(self, tool_input: EditInput) -> ToolOutput:
        path = self.workspace.resolve(tool_input.file_path)
        old, new = tool_input.old_string, tool_input.new_string
        if not path.exists():
            if old != "":
                raise ToolError(f"File does not exist. Note: your current working directory is {self.workspace.root}.")
            original, updated = "", new
        else:
            original = read_text(path, tool_input.file_path)
            crlf = "\r\n" in original and "\r" not in old
            text = original.replace("\r\n", "\n") if crlf else original
            new = new.replace("\r\n", "\n") if crlf else new
            if old == "":
                if text.strip():
                    raise ToolError(FILE_EXISTS)
                replaced = new
            else:
                matches = text.count(old)
                if matches == 0:
                    raise ToolError(not_found(old))
                if matches > 1 and not tool_input.replace_all:
                    raise ToolError(ambiguous(matches, old))
                replaced = text.replace(old, new) if tool_input.replace_all else text.replace(old, new, 1)
            updated = replaced.replace("\n", "\r\n") if crlf else replaced
        write_text(path, updated)
        if tool_input.replace_all:
            message = f"The file {tool_input.file_path} has been updated. All occurrences were successfully replaced."
        else:
            message = f"The file {tool_input.file_path} has been updated successfully."
        return ToolOutput(
            message,
            tool_use_result={
                "filePath": tool_input.file_path,
                "oldString": old,
                "newString": new,
                "originalFile": original,
                "structuredPatch": structured_patch(original, updated),  # type: ignore[dict-item]
                "userModified": False,
                "replaceAll": tool_input.replace_all,
            },
        )
