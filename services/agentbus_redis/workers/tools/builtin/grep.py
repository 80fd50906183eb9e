"""Grep: regular-expression search over files in the workspace (a deterministic Python
implementation; patterns use Python ``re`` syntax, which agrees with ripgrep's for the common
subset)."""

from __future__ import annotations

import asyncio
import re
from collections.abc import AsyncIterator
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Literal

from pydantic import ConfigDict, Field

from agentbus_redis.json_types import JsonObject
from agentbus_redis.permissions.path_glob import gitignore_match
from agentbus_redis.tools.tool import Tool, ToolContext, ToolError, ToolInput, ToolOutput, ToolProgress, json_list
from agentbus_redis.workers.tools.builtin._files import SNIFF_BYTES, looks_binary
from agentbus_redis.workers.tools.builtin.search import modified_time, search_root, walk_files
from agentbus_redis.workers.tools.workspace import Workspace

OutputMode = Literal["content", "files_with_matches", "count"]


class GrepInput(ToolInput):
    model_config = ConfigDict(extra="forbid", frozen=True, populate_by_name=False)

    pattern: str = Field(description="The regular expression to search for in file contents")
    path: str | None = Field(
        default=None,
        description="The file or directory to search in (absolute inside the workspace, or relative to its "
        "root). Defaults to the workspace root",
    )
    glob: str | None = Field(
        default=None, description='Only search files matching this glob (e.g. "*.js", "*.{ts,tsx}"), gitignore-style'
    )
    output_mode: OutputMode = Field(
        default="files_with_matches",
        description='"content" shows matching lines, "files_with_matches" shows file paths (the default), '
        '"count" shows match counts per file',
    )
    case_insensitive: bool = Field(default=False, alias="-i", description="Case insensitive search")
    line_numbers: bool = Field(
        default=True, alias="-n", description='Show line numbers in the output (output_mode "content" only)'
    )
    after: int | None = Field(
        default=None, alias="-A", ge=0, description='Lines to show after each match (output_mode "content" only)'
    )
    before: int | None = Field(
        default=None, alias="-B", ge=0, description='Lines to show before each match (output_mode "content" only)'
    )
    around: int | None = Field(
        default=None,
        alias="-C",
        ge=0,
        description='Lines to show before and after each match (output_mode "content" only)',
    )
    head_limit: int | None = Field(
        default=None,
        ge=0,
        description="Keep only the first N lines or entries of the output, in every output mode. Defaults to all",
    )
    multiline: bool = Field(
        default=False,
        description="Let patterns span lines: . matches newlines and ^/$ match at every line. Default: each line "
        "is matched on its own",
    )


@dataclass
class _FileHits:
    path: Path
    lines: list[str]
    matched: list[int]
    """0-based indexes of matching lines (content/count modes)."""
    count: int


@dataclass(frozen=True, slots=True)
class SkippedFile:
    """A file Grep did not search, and why (said in the result: a silent skip reads as "no match")."""

    path: Path
    reason: Literal["too_large", "unreadable"]
    detail: str
    """The file's size (too_large) or the operating system's error (unreadable)."""


SKIPPED_LISTED = 20
"""Skipped files named in the result text; the rest are counted."""


def _plural(count: int, word: str) -> str:
    return f"{count} {word}" if count == 1 else f"{count} {word}s"


def _megabytes(size: int) -> str:
    return f"{size / 1024 / 1024:.1f} MB"


def skipped_note(skipped: list[SkippedFile], max_file_bytes: int) -> str:
    """The paragraph that names the files a search left out, with what to do about each kind."""
    paragraphs: list[str] = []
    for reason, headline in (
        (
            "too_large",
            f"larger than Grep's {_megabytes(max_file_bytes)} limit (search them with Bash, e.g. "
            "`grep -n PATTERN FILE`, or Read them in parts)",
        ),
        ("unreadable", "that could not be read"),
    ):
        files = [item for item in skipped if item.reason == reason]
        if not files:
            continue
        listed = [f"{item.path} ({item.detail})" for item in files[:SKIPPED_LISTED]]
        if len(files) > SKIPPED_LISTED:
            listed.append(f"... and {len(files) - SKIPPED_LISTED} more")
        paragraphs.append(f"Not searched: {_plural(len(files), 'file')} {headline}:\n" + "\n".join(listed))
    return "\n\n".join(paragraphs)


class GrepTool(Tool[GrepInput]):
    """``output_mode``: ``files_with_matches`` (default; newest first), ``content``
    (``path:line:text``, ``-A/-B/-C`` context as ``path-line-text``, ``--`` between groups) or
    ``count`` (``path:n``). ``glob`` filters files gitignore-style (``*.py`` at any depth).
    Binary files and ``.git`` are skipped; files over ``max_file_bytes`` or unreadable are skipped
    and named at the end of the result (``Not searched: …``), so a skip never reads as no match."""

    name = "Grep"
    input_model = GrepInput

    def __init__(
        self, workspace: Workspace, *, max_file_bytes: int = 10 * 1024 * 1024, max_output_chars: int = 100_000
    ):
        self.workspace = workspace
        self.max_file_bytes = max_file_bytes
        self.max_output_chars = max_output_chars

    def description(self) -> str:
        return (
            "Searches file contents in the workspace with regular expressions.\n\n"
            "Usage:\n"
            "- Use Grep for content searches rather than grep or rg through Bash.\n"
            "- Patterns are Python regular expressions, which agree with ripgrep's for the common cases "
            '("log.*Error", "function\\s+\\w+"); escape literal braces and other special characters.\n'
            '- Filter files with glob (e.g. "*.js", "**/*.tsx"), matched gitignore-style at any depth.\n'
            '- output_mode: "files_with_matches" (the default) lists the matching files, most recently modified '
            'first; "content" shows the matching lines as path:line:text (context lines with -A/-B/-C, as '
            'path-line-text, "--" between groups); "count" shows path:count per file.\n'
            "- A pattern matches within one line unless multiline is true.\n"
            f"- Binary files and .git are skipped. Files over {_megabytes(self.max_file_bytes)} or unreadable are "
            "not searched and are named at the end of the result.\n"
            f"- Content output longer than {self.max_output_chars} characters is cut; narrow the search or use "
            "head_limit."
        )

    def is_read_only(self, tool_input: GrepInput) -> bool:
        return True

    def is_concurrency_safe(self, tool_input: GrepInput) -> bool:
        return True

    async def validate_input(self, tool_input: GrepInput, ctx: ToolContext) -> None:
        search_root(self.workspace, tool_input.path)
        self._compile(tool_input)

    def permission_paths(self, tool_input: GrepInput) -> list[str]:
        return [str(search_root(self.workspace, tool_input.path))]

    @staticmethod
    def _compile(tool_input: GrepInput) -> re.Pattern[str]:
        flags = re.IGNORECASE if tool_input.case_insensitive else 0
        if tool_input.multiline:
            flags |= re.DOTALL | re.MULTILINE
        try:
            return re.compile(tool_input.pattern, flags)
        except re.error as error:
            raise ToolError(f"Invalid regular expression {tool_input.pattern!r}: {error}") from error

    async def call(self, tool_input: GrepInput, ctx: ToolContext) -> AsyncIterator[ToolProgress | ToolOutput]:
        yield await asyncio.to_thread(self._grep, tool_input)

    def _search_file(self, path: Path, regex: re.Pattern[str], tool_input: GrepInput) -> _FileHits | SkippedFile | None:
        try:
            size = path.stat().st_size
            if size > self.max_file_bytes:
                return SkippedFile(path, "too_large", _megabytes(size))
            data = path.read_bytes()
        except OSError as error:
            return SkippedFile(path, "unreadable", error.strerror or type(error).__name__)
        if looks_binary(data[:SNIFF_BYTES]):
            return None
        text = data.decode("utf-8", errors="replace")
        lines = text.split("\n")
        if tool_input.multiline:
            starts = [match.start() for match in regex.finditer(text)]
            matched = sorted({text.count("\n", 0, start) for start in starts})
            count = len(starts)
        else:
            matched = [index for index, line in enumerate(lines) if regex.search(line)]
            count = len(matched)
        return _FileHits(path, lines, matched, count) if count else None

    def _grep(self, tool_input: GrepInput) -> ToolOutput:
        regex = self._compile(tool_input)
        root = search_root(self.workspace, tool_input.path)
        hits: list[_FileHits] = []
        skipped: list[SkippedFile] = []
        for path, relative in walk_files(self.workspace, root):
            if tool_input.glob and not gitignore_match(tool_input.glob, relative):
                continue
            found = self._search_file(path, regex, tool_input)
            if isinstance(found, SkippedFile):
                skipped.append(found)
            elif found is not None:
                hits.append(found)
        if tool_input.output_mode == "content":
            output = self._content(hits, tool_input)
        elif tool_input.output_mode == "count":
            output = self._count(hits, tool_input)
        else:
            output = self._files(hits, tool_input)
        return self._with_skipped(output, skipped)

    def _with_skipped(self, output: ToolOutput, skipped: list[SkippedFile]) -> ToolOutput:
        """Append the ``Not searched`` note to the text and list the files in ``toolUseResult.skipped``."""
        if not skipped or not isinstance(output.content, str) or not isinstance(output.tool_use_result, dict):
            return output
        note = skipped_note(skipped, self.max_file_bytes)
        listed: JsonObject = {
            **output.tool_use_result,
            "skipped": [{"path": str(item.path), "reason": item.reason, "detail": item.detail} for item in skipped],
        }
        return replace(output, content=f"{output.content}\n\n{note}", tool_use_result=listed)

    def _limit(self, items: list[str], tool_input: GrepInput) -> list[str]:
        return items if tool_input.head_limit is None else items[: tool_input.head_limit]

    def _files(self, hits: list[_FileHits], tool_input: GrepInput) -> ToolOutput:
        ordered = sorted(hits, key=lambda hit: (-modified_time(hit.path), str(hit.path)))
        filenames = self._limit([str(hit.path) for hit in ordered], tool_input)
        content = f"Found {_plural(len(filenames), 'file')}\n" + "\n".join(filenames) if filenames else "No files found"
        result: JsonObject = {
            "mode": "files_with_matches",
            "filenames": json_list(filenames),
            "numFiles": len(filenames),
        }
        return ToolOutput(content, tool_use_result=result)

    def _count(self, hits: list[_FileHits], tool_input: GrepInput) -> ToolOutput:
        rows = self._limit([f"{hit.path}:{hit.count}" for hit in hits], tool_input)
        total = sum(hit.count for hit in hits[: len(rows)])
        if not rows:
            return ToolOutput(
                "No matches found", tool_use_result={"mode": "count", "numFiles": 0, "filenames": [], "numMatches": 0}
            )
        summary = f"\n\nFound {_plural(total, 'total occurrence')} across {_plural(len(rows), 'file')}."
        content = "\n".join(rows) + summary
        filenames = [str(hit.path) for hit in hits[: len(rows)]]
        return ToolOutput(
            content,
            tool_use_result={
                "mode": "count",
                "numFiles": len(rows),
                "filenames": json_list(filenames),
                "content": "\n".join(rows),
                "numMatches": total,
            },
        )

    def _content(self, hits: list[_FileHits], tool_input: GrepInput) -> ToolOutput:
        before = tool_input.before if tool_input.before is not None else tool_input.around or 0
        after = tool_input.after if tool_input.after is not None else tool_input.around or 0
        rows: list[str] = []
        for hit in hits:
            matched = set(hit.matched)
            shown: list[int] = sorted(
                {
                    line
                    for index in hit.matched
                    for line in range(max(0, index - before), min(len(hit.lines), index + after + 1))
                }
            )
            previous = None
            for line in shown:
                if (before or after) and previous is not None and line != previous + 1:
                    rows.append("--")
                marker = ":" if line in matched else "-"
                number = f"{line + 1}{marker}" if tool_input.line_numbers else ""
                rows.append(f"{hit.path}{marker}{number}{hit.lines[line]}")
                previous = line
            if (before or after) and hit is not hits[-1]:
                rows.append("--")
        rows = self._limit(rows, tool_input)
        content = "\n".join(rows) if rows else "No matches found"
        if len(content) > self.max_output_chars:
            content = content[: self.max_output_chars] + "\n\n(Results truncated; narrow the pattern, path or glob.)"
        filenames = [str(hit.path) for hit in hits]
        return ToolOutput(
            content,
            tool_use_result={
                "mode": "content",
                "numFiles": len(filenames),
                "filenames": json_list(filenames),
                "content": content,
                "numLines": len(rows),
            },
        )
