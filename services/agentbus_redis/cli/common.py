"""Helpers shared by the CLI commands: reading input files and failing with a clear message."""

from __future__ import annotations

import shlex
from pathlib import Path
from typing import NoReturn

import typer

from agentbus_redis.cli.errors import USAGE_ERROR as USAGE_ERROR  # re-exported: the commands import it from here


def fail(message: str, *, code: int = 1) -> NoReturn:
    """Print ``agentbus: <message>`` on stderr and exit with ``code``."""
    typer.echo(f"agentbus: {message}", err=True)
    raise typer.Exit(code)


def read_input(path: Path) -> bytes:
    """The bytes of ``path``, or a usage error naming the file."""
    try:
        return path.read_bytes()
    except OSError as error:
        fail(f"cannot read {path}: {error.strerror or error}", code=USAGE_ERROR)


def same_file(first: Path, second: Path) -> bool:
    """True when both paths name one file (symlinks and relative paths included)."""
    if first.resolve() == second.resolve():
        return True
    try:
        return first.exists() and second.exists() and first.samefile(second)
    except OSError:
        return False


def resume_hint(cwd: str, claude_session_id: str) -> str:
    """``cd '<cwd>' && claude --resume <uuid>``: the shell line that opens a session's transcript in Claude
    Code (it looks for ``<uuid>.jsonl`` in the project dir of the directory it runs in)."""
    return f"cd {shlex.quote(cwd)} && claude --resume {claude_session_id}"


def checked_session_id(value: str | None) -> str | None:
    """Typer callback: a session id outside the grammar (session_ids.py) is a usage error."""
    from agentbus_redis.session_ids import session_id_problem

    if value is not None and (problem := session_id_problem(value)) is not None:
        raise typer.BadParameter(f"invalid session id {value!r}: {problem}")
    return value
