"""``agentbus normalize FILE.jsonl [--prompt TEXT] [--leaf UUID] [--check]``: a transcript → an API request."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated

import typer

from agentbus_redis.api.types import MessagesRequest
from agentbus_redis.api.validation import ApiViolation, validate_api_request
from agentbus_redis.cli.common import USAGE_ERROR, fail, read_input
from agentbus_redis.cli.formats import FormatOption, pi_session_or_none
from agentbus_redis.errors import AgentbusError, UnusableTranscript
from agentbus_redis.transcript import well_formed_json
from agentbus_redis.transcript_files.api_view import (
    api_view_of_transcript,
    encoded_body,
    read_notices,
    require_conversation,
)
from agentbus_redis.transcript_files.pi_view import NormalizeRules, pi_request


def normalize_command(
    file: Annotated[Path, typer.Argument(help="A Claude Code (or agentbus) JSONL transcript, or a pi session file.")],
    prompt: Annotated[
        str | None, typer.Option("--prompt", help="Append TEXT as a new human prompt, as a user resuming would.")
    ] = None,
    leaf: Annotated[
        str | None,
        typer.Option("--leaf", help="Resume the chain ending at this uuid (pi: entry id) instead of the main one."),
    ] = None,
    check: Annotated[
        bool, typer.Option("--check", help="Exit 1 when the history could not be sent to the API as it stands.")
    ] = False,
    file_format: FormatOption = None,
    rules: Annotated[
        NormalizeRules,
        typer.Option("--rules", help="pi: the request pi itself would send for a pi session (P5/P6, unrepaired)."),
    ] = "agentbus",
) -> None:
    """Resume FILE's main chain (or the chain ending at --leaf), normalize it for the Messages API and
    print {"messages": [...]} as JSON on stdout. Malformed lines are skipped (listed on stderr).

    Without --prompt the resumed history is printed as it is (exit 0); when it could not be sent as it
    stands (e.g. it ends with the assistant's reply) one line on stderr says why, and --check makes that
    exit 1. With --prompt the request must be sendable: otherwise exit 1. An empty file needs --prompt;
    a binary or non-JSONL file is refused (file, line, reason; exit 1).

    A pi session file (its first line a pi header, or --format pi) is rebuilt at its last entry (or the
    entry id --leaf) as pi does (P8); --rules pi prints pi's own request instead of agentbus' one."""
    data = read_input(file)
    session = pi_session_or_none(file, data, file_format)
    if session is not None:
        try:
            body = pi_request(session, leaf=leaf, prompt=prompt, rules=rules)
        except AgentbusError as error:
            fail(f"{file}: {error}")
        print_request(file, body, prompt=prompt, check=check)
        return
    if rules == "pi":
        fail(f"{file}: --rules pi needs a pi session file (the first line is no pi header)", code=USAGE_ERROR)
    try:
        view = api_view_of_transcript(data, leaf=leaf, prompt=prompt)
        require_conversation(data, view.resumed, fresh_start=prompt is not None)
    except AgentbusError as error:
        startable = isinstance(error, UnusableTranscript) and error.kind in {"empty", "no_conversation"}
        hint = "; pass --prompt to start a conversation" if startable else ""
        fail(f"{file}: {error}{hint}")
    for notice in read_notices(file, view.resumed):
        typer.echo(notice, err=True)
    text, surrogate_notice = encoded_body(file, view)
    if surrogate_notice:
        typer.echo(surrogate_notice, err=True)
    print_request(file, view.messages_body, prompt=prompt, check=check, text=text)


def print_request(
    file: Path, body: MessagesRequest, *, prompt: str | None, check: bool, text: str | None = None
) -> None:
    """Print ``body`` on stdout; one stderr line (and with --prompt/--check exit 1) when it is not sendable."""
    if text is None:
        text, replaced = well_formed_json(body)
        if replaced:
            typer.echo(f"agentbus: {file}: replaced {replaced} lone surrogate(s) with U+FFFD in the output", err=True)
    sys.stdout.write(text + "\n")
    violations = validate_api_request(body)
    if violations:
        hint = "" if prompt is not None else "; pass --prompt TEXT to append a turn"
        typer.echo(f"agentbus: {file}: {unsendable_reason(violations)}{hint}", err=True)
        if prompt is not None or check:
            raise typer.Exit(1)


def unsendable_reason(violations: list[ApiViolation]) -> str:
    """One line: the first broken API rule with its location, and how many more there are."""
    first = violations[0]
    where = "" if first.message_index is None else f" at messages[{first.message_index}]"
    if first.block_index is not None:
        where += f".content[{first.block_index}]"
    more = f" (+{len(violations) - 1} more)" if len(violations) > 1 else ""
    return f"not sendable as it stands: API rule {first.rule} broken{where}: {first.detail.rstrip('.')}{more}"
