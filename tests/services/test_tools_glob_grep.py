"""Glob (mtime order, truncation) and Grep (the three output modes) on real files."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from agentbus_redis.tools.tool import AnyTool, ToolContext, ToolError, ToolOutput
from agentbus_redis.workers.tools.builtin.glob import TRUNCATION_NOTE, GlobTool
from agentbus_redis.workers.tools.builtin.grep import SKIPPED_LISTED, GrepTool, SkippedFile, skipped_note
from agentbus_redis.workers.tools.workspace import Workspace


@pytest.fixture
def workspace(tmp_path: Path) -> Workspace:
    root = tmp_path / "ws"
    files = {
        "README.md": "# Title\nTODO: write docs\n",
        "src/app.py": "import os\n\ndef main():\n    # todo: refactor\n    return os.getcwd()\n",
        "src/util.py": "def helper():\n    return 1\n",
        "src/ui/view.tsx": "export const View = () => null // TODO\n",
        "notes/todo.txt": "TODO one\nnothing\nTODO two\n",
        ".git/HEAD": "ref: refs/heads/main TODO\n",
        "bin.dat": "TODO",
    }
    for index, (name, text) in enumerate(sorted(files.items())):
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        os.utime(path, (1_700_000_000 + index * 10, 1_700_000_000 + index * 10))
    (root / "bin.dat").write_bytes(b"TODO\x00\x01")
    return Workspace.at(root)


async def run(tool: AnyTool, **raw: Any) -> ToolOutput:
    parsed = tool.input_model.model_validate(raw)
    ctx = ToolContext(tool_use_id="toolu_1")
    await tool.validate_input(parsed, ctx)
    [output] = [event async for event in tool.call(parsed, ctx)]
    assert isinstance(output, ToolOutput)
    return output


def paths(workspace: Workspace, *names: str) -> list[str]:
    return [str(workspace.root / name) for name in names]


def set_mtime(path: Path, seconds: int) -> None:
    os.utime(path, (seconds, seconds))


async def test_glob_sorts_by_mtime_oldest_first(workspace: Workspace) -> None:
    root = workspace.root
    set_mtime(root / "src/util.py", 1_000)
    set_mtime(root / "src/app.py", 3_000)
    set_mtime(root / "src/ui/view.tsx", 2_000)
    output = await run(GlobTool(workspace), pattern="src/**/*")
    assert output.content == "\n".join(paths(workspace, "src/util.py", "src/ui/view.tsx", "src/app.py"))
    assert isinstance(output.tool_use_result, dict)
    assert output.tool_use_result["filenames"] == paths(workspace, "src/util.py", "src/ui/view.tsx", "src/app.py")
    assert output.tool_use_result["numFiles"] == 3
    assert output.tool_use_result["truncated"] is False


async def test_glob_pattern_semantics(workspace: Workspace) -> None:
    assert (await run(GlobTool(workspace), pattern="*.md")).content == str(workspace.root / "README.md")
    top_level_only = await run(GlobTool(workspace), pattern="*.py")
    assert top_level_only.content == "No files found"
    braces = await run(GlobTool(workspace), pattern="**/*.{py,tsx}")
    assert sorted(str(braces.content).splitlines()) == paths(workspace, "src/app.py", "src/ui/view.tsx", "src/util.py")
    in_dir = await run(GlobTool(workspace), pattern="*.py", path="src")
    assert sorted(str(in_dir.content).splitlines()) == paths(workspace, "src/app.py", "src/util.py")
    absolute = await run(GlobTool(workspace), pattern=str(workspace.root / "src" / "*.py"))
    assert sorted(str(absolute.content).splitlines()) == paths(workspace, "src/app.py", "src/util.py")
    assert ".git" not in str((await run(GlobTool(workspace), pattern="**/*")).content)


async def test_glob_truncates(workspace: Workspace) -> None:
    output = await run(GlobTool(workspace, max_results=2), pattern="**/*")
    lines = str(output.content).splitlines()
    assert lines[-1] == TRUNCATION_NOTE
    assert len(lines) == 3
    assert isinstance(output.tool_use_result, dict)
    assert output.tool_use_result["truncated"] is True


async def test_glob_rejects_parent_patterns_and_missing_paths(workspace: Workspace) -> None:
    with pytest.raises(ToolError, match="may not contain '\\.\\.'"):
        await run(GlobTool(workspace), pattern="src/../../*")
    with pytest.raises(ToolError, match="Path does not exist: nowhere"):
        await run(GlobTool(workspace), pattern="*", path="nowhere")


async def test_grep_files_with_matches_newest_first(workspace: Workspace) -> None:
    set_mtime(workspace.root / "README.md", 5_000)
    set_mtime(workspace.root / "notes/todo.txt", 9_000)
    set_mtime(workspace.root / "src/ui/view.tsx", 1_000)
    output = await run(GrepTool(workspace), pattern="TODO")
    expected = paths(workspace, "notes/todo.txt", "README.md", "src/ui/view.tsx")
    assert output.content == "Found 3 files\n" + "\n".join(expected)
    assert output.tool_use_result == {"mode": "files_with_matches", "filenames": expected, "numFiles": 3}


async def test_grep_content_mode(workspace: Workspace) -> None:
    output = await run(GrepTool(workspace), pattern="TODO", path="notes", output_mode="content")
    file = workspace.root / "notes/todo.txt"
    assert output.content == f"{file}:1:TODO one\n{file}:3:TODO two"
    no_numbers = await run(GrepTool(workspace), pattern="todo", path="notes", output_mode="content", **{"-n": False})
    assert no_numbers.content == "No matches found"
    insensitive = await run(
        GrepTool(workspace), pattern="todo", path="notes/todo.txt", output_mode="content", **{"-i": True, "-n": False}
    )
    assert insensitive.content == f"{file}:TODO one\n{file}:TODO two"


async def test_grep_context_lines(workspace: Workspace) -> None:
    output = await run(GrepTool(workspace), pattern="refactor", path="src", output_mode="content", **{"-C": 1})
    file = workspace.root / "src/app.py"
    assert output.content == f"{file}-3-def main():\n{file}:4:    # todo: refactor\n{file}-5-    return os.getcwd()"


async def test_grep_count_mode_glob_and_head_limit(workspace: Workspace) -> None:
    output = await run(GrepTool(workspace), pattern="TODO", glob="*.txt", output_mode="count")
    assert output.content == f"{workspace.root / 'notes/todo.txt'}:2\n\nFound 2 total occurrences across 1 file."
    limited = await run(GrepTool(workspace), pattern="TODO", output_mode="files_with_matches", head_limit=1)
    assert str(limited.content).startswith("Found 1 file\n")


async def test_grep_skips_binary_and_git(workspace: Workspace) -> None:
    output = await run(GrepTool(workspace), pattern="TODO", output_mode="count")
    assert "bin.dat" not in str(output.content)
    assert ".git" not in str(output.content)


async def test_grep_multiline_and_invalid_regex(workspace: Workspace) -> None:
    output = await run(
        GrepTool(workspace), pattern=r"def helper\(\):\n\s+return", path="src", output_mode="content", multiline=True
    )
    assert output.content == f"{workspace.root / 'src/util.py'}:1:def helper():"
    with pytest.raises(ToolError, match="Invalid regular expression"):
        await run(GrepTool(workspace), pattern="(unclosed")


async def test_grep_names_the_files_it_did_not_search_issue_15(workspace: Workspace) -> None:
    """Issue 15: a file over the size limit was skipped silently and the answer was "No matches found"."""
    big = workspace.root / "logs/big.log"
    big.parent.mkdir()
    big.write_text("needle\n")
    os.truncate(big, 11 * 1024 * 1024)
    note = (
        "Not searched: 1 file larger than Grep's 10.0 MB limit (search them with Bash, e.g. "
        f"`grep -n PATTERN FILE`, or Read them in parts):\n{big} (11.0 MB)"
    )
    skipped = [{"path": str(big), "reason": "too_large", "detail": "11.0 MB"}]
    for mode, answer in (
        ("content", "No matches found"),
        ("count", "No matches found"),
        ("files_with_matches", "No files found"),
    ):
        output = await run(GrepTool(workspace), pattern="needle", output_mode=mode)
        assert output.content == f"{answer}\n\n{note}"
        assert isinstance(output.tool_use_result, dict)
        assert output.tool_use_result["skipped"] == skipped
    found = await run(GrepTool(workspace), pattern="TODO", path="notes")
    assert found.content == f"Found 1 file\n{workspace.root / 'notes/todo.txt'}"
    assert isinstance(found.tool_use_result, dict)
    assert "skipped" not in found.tool_use_result


def test_grep_skipped_note_lists_unreadable_files_and_counts_the_rest() -> None:
    many = [
        SkippedFile(Path(f"/ws/f{index}"), "unreadable", "Permission denied") for index in range(SKIPPED_LISTED + 3)
    ]
    note = skipped_note(many, 10 * 1024 * 1024)
    lines = note.split("\n")
    assert lines[0] == f"Not searched: {SKIPPED_LISTED + 3} files that could not be read:"
    assert lines[1] == "/ws/f0 (Permission denied)"
    assert lines[-1] == "... and 3 more"
    assert len(lines) == SKIPPED_LISTED + 2
