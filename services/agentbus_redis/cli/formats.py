"""The ``--format pi|claude-code`` option of the commands that read a transcript file, and reading a file
as a pi session when it is one (detected from its header, P7.3). Light to import (the CLI loads commands
lazily): the pi reader is imported when a file is read."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from agentbus_redis.cli.common import fail
from agentbus_redis.pi.constants import TranscriptFormat

if TYPE_CHECKING:
    from agentbus_redis.pi.session import PiSession

FormatOption = Annotated[
    TranscriptFormat | None,
    typer.Option(
        "--format", help="The file's format: pi or claude-code (default: pi when the first line is a pi header)."
    ),
]


def pi_session_or_none(file: Path, data: bytes, forced: TranscriptFormat | None) -> PiSession | None:
    """FILE's pi session, its skipped lines listed on stderr, or None for a Claude Code transcript."""
    from agentbus_redis.errors import UnusableTranscript
    from agentbus_redis.transcript_files.pi_view import pi_notices, read_pi_file, transcript_format

    if transcript_format(data, forced) != "pi":
        return None
    try:
        session = read_pi_file(data)
    except UnusableTranscript as error:
        fail(f"{file}: {error}")
    for notice in pi_notices(file, session):
        typer.echo(notice, err=True)
    return session
