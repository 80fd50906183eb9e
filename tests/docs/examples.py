"""The code blocks of README.md and docs/: which are run, how, and which say why they are not.

Conventions (tests/docs/test_examples.py enforces them):

- ```` ```python ```` blocks are complete programs and are all run; none may be marked not-run.
- ```` ```bash ````/```` ```sh ```` blocks run as one ``bash -euo pipefail`` script, ```` ```console ```` blocks
  run their ``$ `` lines — unless the line before the fence is ``<!-- not-run: <reason> -->``.
- ```` ```json ```` and ```` ```toml ```` blocks must parse; ```` ```text ```` blocks are output or pictures.
- Any other language needs a not-run reason.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
DOCS = ROOT / "docs"

SHELL = frozenset({"bash", "sh", "shell", "console"})
PARSED = frozenset({"json", "toml"})
OUTPUT = frozenset({"text"})
NOT_RUN = re.compile(r"^<!-- not-run: (?P<reason>.+?) -->$")
FENCE = re.compile(r"^```(?P<info>.*)$")


@dataclass(frozen=True)
class Block:
    path: Path
    line: int
    """1-based line of the opening fence."""
    language: str
    code: str
    not_run: str | None
    """The reason given in ``<!-- not-run: … -->`` on the line before the fence."""

    @property
    def id(self) -> str:
        return f"{self.path.relative_to(ROOT)}:{self.line}"


def markdown_files() -> list[Path]:
    return [README, *sorted(DOCS.rglob("*.md"))]


def blocks_of(path: Path) -> list[Block]:
    lines = path.read_text(encoding="utf-8").splitlines()
    found: list[Block] = []
    start: int | None = None
    info = ""
    for index, line in enumerate(lines):
        fence = FENCE.match(line)
        if fence is None:
            continue
        if start is None:
            start, info = index, fence.group("info").strip()
            continue
        marker = NOT_RUN.match(lines[start - 1].strip()) if start > 0 else None
        language = info.split()[0].strip("{.") if info else ""
        found.append(
            Block(
                path,
                start + 1,
                language,
                "\n".join(lines[start + 1 : index]) + "\n",
                marker.group("reason") if marker else None,
            )
        )
        start = None
    assert start is None, f"{path}:{start + 1 if start is not None else 0}: a code fence is never closed"
    return found


def all_blocks() -> list[Block]:
    return [block for path in markdown_files() for block in blocks_of(path)]


def shell_script(block: Block) -> str:
    """What a shell block runs: its commands, with the docs' ``uv run `` prefix dropped (the test runs in the
    project's environment already)."""
    if block.language == "console":
        commands = [line[2:] for line in block.code.splitlines() if line.startswith("$ ")]
    else:
        commands = block.code.splitlines()
    return "\n".join(re.sub(r"^uv run (--no-dev )?", "", command) for command in commands) + "\n"
