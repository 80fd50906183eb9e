"""Glob: files whose path (relative to the search directory) matches a glob pattern."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator

from pydantic import Field

from agentbus_redis.permissions.path_glob import glob_match, normalize_posix
from agentbus_redis.tools.tool import Tool, ToolContext, ToolError, ToolInput, ToolOutput, ToolProgress, json_list
from agentbus_redis.workers.tools.builtin.search import modified_time, search_root, walk_files
from agentbus_redis.workers.tools.workspace import Workspace

TRUNCATION_NOTE = "(Results are truncated. Consider using a more specific path or pattern.)"


class GlobInput(ToolInput):
    pattern: str = Field(description="The glob pattern to match files against")
    path: str | None = Field(
        default=None,
        description="The directory to search in (absolute inside the workspace, or relative to its root). Leave "
        "it out to search the workspace root",
    )


class GlobTool(Tool[GlobInput]):
    """``**/*.py``-style patterns, matched against paths relative to ``path`` (default: the
    workspace root; ``*.md`` matches only that directory's files). Results: absolute paths, oldest
    modification first, at most ``max_results``."""

    name = "Glob"
    input_model = GlobInput

    def __init__(self, workspace: Workspace, *, max_results: int = 100) -> None:
        self.workspace = workspace
        self.max_results = max_results

    def description(self) -> str:
        return (
            "Fast file pattern matching inside the workspace.\n"
            '- Supports glob patterns like "**/*.js" or "src/**/*.ts", matched against paths relative to the '
            'search directory ("*.md" matches only the files directly in it).\n'
            "- Returns the absolute paths of matching files, least recently modified first, at most "
            f"{self.max_results} (the result says when there were more).\n"
            "- .git is skipped and symbolic links to directories are not followed.\n"
            "- Use it to find files by name; use Grep to search file contents."
        )

    def is_read_only(self, tool_input: GlobInput) -> bool:
        return True

    def is_concurrency_safe(self, tool_input: GlobInput) -> bool:
        return True

    async def validate_input(self, tool_input: GlobInput, ctx: ToolContext) -> None:
        root = search_root(self.workspace, tool_input.path)
        if not root.is_dir():
            raise ToolError(f"Path is not a directory: {tool_input.path}")
        self._relative_pattern(tool_input)

    def permission_paths(self, tool_input: GlobInput) -> list[str]:
        return [str(search_root(self.workspace, tool_input.path))]

    def _relative_pattern(self, tool_input: GlobInput) -> str:
        """An absolute pattern is accepted when it lies under the search directory."""
        pattern = tool_input.pattern
        if not pattern.strip():
            raise ToolError("The glob pattern must not be empty.")
        if pattern.startswith("/"):
            root = str(search_root(self.workspace, tool_input.path))
            prefix = root.rstrip("/") + "/"
            if not pattern.startswith(prefix):
                raise ToolError(f"Pattern {pattern} is outside the search directory {root}.")
            pattern = pattern[len(prefix) :]
        if ".." in normalize_posix(pattern).split("/"):
            raise ToolError("Glob patterns may not contain '..'; set path to search another directory.")
        return pattern

    async def call(self, tool_input: GlobInput, ctx: ToolContext) -> AsyncIterator[ToolProgress | ToolOutput]:
        yield await asyncio.to_thread(self._glob, tool_input)

    def _glob(self, tool_input: GlobInput) -> ToolOutput:
        started = time.monotonic()
        root = search_root(self.workspace, tool_input.path)
        pattern = self._relative_pattern(tool_input)
        found = [
            (modified_time(path), str(path))
            for path, relative in walk_files(self.workspace, root)
            if glob_match(pattern, relative)
        ]
        found.sort()
        truncated = len(found) > self.max_results
        filenames = [path for _, path in found[: self.max_results]]
        content = "\n".join(filenames) if filenames else "No files found"
        if truncated:
            content += "\n" + TRUNCATION_NOTE
        return ToolOutput(
            content,
            tool_use_result={
                "filenames": json_list(filenames),
                "durationMs": round((time.monotonic() - started) * 1000),
                "numFiles": len(filenames),
                "truncated": truncated,
            },
        )
