"""``agentbus normalize FILE.jsonl [--prompt TEXT] [--leaf UUID]``: a transcript → an API request."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated

import typer

from services.cli.common import fail, read_input
from services.transcripts.api_view import api_view_of_transcript, encoded_body, read_notices
from shared.api_validation import validate_api_request
from shared.errors import AgentbusError


def normalize_command(
    file: Annotated[Path, typer.Argument(help="A Claude Code (or agentbus) JSONL transcript.")],
    prompt: Annotated[
        str | None, typer.Option("--prompt", help="Append TEXT as a new human prompt, as a user resuming would.")
    ] = None,
    leaf: Annotated[
        str | None, typer.Option("--leaf", help="Resume the chain ending at this uuid instead of the main one.")
    ] = None,
) -> None:
    """Resume FILE's main chain (or the chain ending at --leaf), normalize it for the Messages API and
    print {"messages": [...]} as JSON on stdout. Malformed lines are skipped (listed on stderr)."""
    data = read_input(file)
    try:
        view = api_view_of_transcript(data, leaf=leaf, prompt=prompt)
    except AgentbusError as error:
        fail(f"{file}: {error}")
    for notice in read_notices(file, view.resumed):
        typer.echo(notice, err=True)
    body = view.messages_body
    if not view.resumed.messages and prompt is None:
        fail(f"{file}: no conversation to normalize (no user or assistant message); pass --prompt to start one")
    text, surrogate_notice = encoded_body(file, view)
    if surrogate_notice:
        typer.echo(surrogate_notice, err=True)
    sys.stdout.write(text + "\n")
    violations = validate_api_request(body)
    if violations:
        for violation in violations:
            where = "" if violation.message_index is None else f" at messages[{violation.message_index}]"
            if violation.block_index is not None:
                where += f".content[{violation.block_index}]"
            typer.echo(f"agentbus: {file}: API rule {violation.rule} broken{where}: {violation.detail}", err=True)
        raise typer.Exit(1)
