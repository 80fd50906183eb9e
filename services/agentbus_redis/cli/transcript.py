"""``agentbus transcript verify | repair | export | convert``: integrity checks, repaired copies, training
exports and format conversions of Claude Code JSONL transcripts and pi session files (detected from the
header, or ``--format``). The input file is only ever read."""

from __future__ import annotations

import dataclasses
import json
import sys
from pathlib import Path
from typing import Annotated

import typer

from agentbus_redis.api.types import MessagesRequest
from agentbus_redis.cli.common import USAGE_ERROR, fail, read_input, same_file
from agentbus_redis.cli.formats import FormatOption, pi_session_or_none
from agentbus_redis.errors import AgentbusError, UnusableTranscript
from agentbus_redis.messages.constants import SYNTHETIC_TOOL_RESULT_PLACEHOLDER
from agentbus_redis.pi.claude_code import claude_code_to_session, session_to_claude_code
from agentbus_redis.pi.constants import TranscriptFormat
from agentbus_redis.pi.integrity import PiIntegrityReport, PiIssue, repair_pi_session, verify_pi_session
from agentbus_redis.pi.session import PiSession, dump_line, write_pi_session
from agentbus_redis.transcript import IntegrityIssue, IntegrityReport, read_transcript, well_formed_json
from agentbus_redis.transcript import repair_transcript as repair_lines
from agentbus_redis.transcript import verify_transcript as verify_lines
from agentbus_redis.transcript.unicode_text import escape_lone_surrogates
from agentbus_redis.transcript_files.api_view import (
    api_view_of_transcript,
    encoded_body,
    placeholder_locations,
    read_notices,
    require_conversation,
)
from agentbus_redis.transcript_files.files import write_file_atomically
from agentbus_redis.transcript_files.pi_view import pi_notices, pi_request, read_pi_file, transcript_format

app = typer.Typer(name="transcript", help="Verify, repair, export and convert JSONL transcripts.", no_args_is_help=True)

FileArgument = Annotated[Path, typer.Argument(help="A Claude Code (or agentbus) JSONL transcript, or a pi session.")]
_MAX_LISTED_LINES = 12


def _where(line_numbers: tuple[int, ...]) -> str:
    if len(line_numbers) == 1:
        return f"line {line_numbers[0]}"
    listed = ", ".join(str(number) for number in line_numbers[:_MAX_LISTED_LINES])
    more = len(line_numbers) - _MAX_LISTED_LINES
    return f"lines {listed}" + (f" (+{more} more)" if more > 0 else "")


def format_issue(issue: IntegrityIssue | PiIssue) -> str:
    """``line 14: error malformed_line: missing_type: no string `type` field``."""
    detail = issue.detail
    if not issue.line_numbers:
        return f"{issue.severity} {issue.kind}: {detail}"
    if len(issue.line_numbers) == 1:
        detail = detail.removeprefix(f"line {issue.line_numbers[0]}: ")
    return f"{_where(issue.line_numbers)}: {issue.severity} {issue.kind}: {detail}"


def _report_json(
    file: Path, line_count: int, report: IntegrityReport | PiIntegrityReport, extra: dict[str, object]
) -> str:
    return json.dumps(
        {
            "file": str(file),
            "ok": report.ok,
            "line_count": line_count,
            **extra,
            "errors": len(report.errors),
            "warnings": len(report.warnings),
            "issues": [dataclasses.asdict(issue) for issue in report.issues],
        },
        ensure_ascii=False,
        indent=2,
    )


@app.command()
def verify(
    file: FileArgument,
    as_json: Annotated[bool, typer.Option("--json", help="Print the report as JSON.")] = False,
    file_format: FormatOption = None,
    tree: Annotated[
        bool,
        typer.Option(
            "--tree", help="Also verify the session's sub-agent transcripts (<session>/subagents/agent-*.jsonl)."
        ),
    ] = False,
) -> None:
    """Report chain breaks, cycles, duplicate uuids, unpaired tool_use / orphan tool_result, placeholder
    results and malformed lines, with line numbers. Exit 1 when there is any error, 0 otherwise.

    A pi session: duplicate ids, cycles, dangling parents, and in the context at the last entry calls
    without results, failed turns and late / duplicate / orphan results (P9)."""
    if tree:
        from agentbus_redis.subagents.transcript_tree import subagent_files

        codes = [_verify_exit_code(path, as_json, file_format) for path in [file, *subagent_files(file)]]
        raise typer.Exit(max(codes))
    raise typer.Exit(_verify_exit_code(file, as_json, file_format))


def _verify_exit_code(file: Path, as_json: bool, file_format: TranscriptFormat | None) -> int:
    """Verify one file, print its report; 0 when it is OK, 1 otherwise."""
    data = read_input(file)
    report: IntegrityReport | PiIntegrityReport
    if transcript_format(data, file_format) == "pi":
        session = _read_pi(file, data)
        report = verify_pi_session(session)
        line_count = len(data.splitlines())
        extra: dict[str, object] = {"format": "pi", "version": session.migrated_from or session.header.version}
    else:
        parse = read_transcript(data)
        report = verify_lines(parse)
        line_count, extra = parse.line_count, {"torn_tail": parse.torn_tail}
    if as_json:
        typer.echo(_report_json(file, line_count, report, extra))
    else:
        for issue in report.issues:
            typer.echo(format_issue(issue))
        verdict = "OK" if report.ok else "FAILED"
        typer.echo(
            f"{file}: {verdict}: {line_count} lines, {len(report.errors)} error(s), {len(report.warnings)} warning(s)"
        )
    return 0 if report.ok else 1


def _read_pi(file: Path, data: bytes) -> PiSession:
    try:
        return read_pi_file(data)
    except UnusableTranscript as error:
        fail(f"{file}: {error}")


@app.command()
def repair(
    file: FileArgument,
    out: Annotated[Path, typer.Option("--out", help="Where to write the repaired copy (never FILE).")],
    force: Annotated[bool, typer.Option("--force", help="Overwrite OUT if it exists.")] = False,
    file_format: FormatOption = None,
) -> None:
    """Write a repaired copy of FILE to OUT: malformed and duplicate lines dropped, broken or cyclic
    parent chains re-linked. The original is never edited.

    A pi session: malformed lines and later lines reusing an id dropped, cycles broken, a late tool
    result moved up to its call (P9.2), duplicate / orphan results of the context taken out of the path;
    messages are never edited. An old (v1/v2) file is written migrated to v3, as pi itself does (P7.9)."""
    _check_out(file, out, force=force)
    data = read_input(file)
    if transcript_format(data, file_format) == "pi":
        _repair_pi(file, data, out)
        return
    result = repair_lines(read_transcript(data))
    write_file_atomically(out, result.text.encode("utf-8"))
    for action in result.actions:
        typer.echo(f"line {action.line_number}: {action.kind}: {action.detail}")
    for issue in result.report.of_kind("invalid_utf8"):  # those bytes are written as U+FFFD
        typer.echo(format_issue(issue))
    remaining = verify_lines(read_transcript(result.text))
    _repair_summary(file, out, len(result.lines), len(result.actions), len(remaining.errors))


def _check_out(file: Path, out: Path, *, force: bool) -> None:
    if same_file(file, out):
        fail(f"refusing to write the repair over the original {file}; choose another --out", code=USAGE_ERROR)
    if out.exists() and not force:
        fail(f"{out} exists; pass --force to overwrite it", code=USAGE_ERROR)


def _repair_summary(file: Path, out: Path, written: int, repairs: int, errors_left: int) -> None:
    typer.echo(f"{file} → {out}: {written} lines written, {repairs} repair(s), {errors_left} error(s) left")


def _repair_pi(file: Path, data: bytes, out: Path) -> None:
    result = repair_pi_session(_read_pi(file, data))
    text = write_pi_session(result.session)
    write_file_atomically(out, text)
    for action in result.actions:
        typer.echo(f"line {action.line_number}: {action.kind}: {action.detail}")
    remaining = verify_pi_session(read_pi_file(text))
    _repair_summary(file, out, len(result.session.entries) + 1, len(result.actions), len(remaining.errors))


@app.command()
def export(
    file: FileArgument,
    training: Annotated[
        bool, typer.Option("--training", help="Refuse sessions whose API view holds synthetic placeholder results.")
    ] = False,
    out: Annotated[Path | None, typer.Option("--out", help="Write the JSON here instead of stdout.")] = None,
    leaf: Annotated[str | None, typer.Option("--leaf", help="Export the chain ending at this uuid.")] = None,
    file_format: FormatOption = None,
) -> None:
    """Export the session's API view (the resumed chain, normalized) as {"messages": [...]} JSON. An empty,
    binary or non-JSONL file, or one without a conversation, is refused (file, line, reason; exit 1).
    A pi session exports agentbus' request of its context at the last entry (or the entry id --leaf)."""
    if out is not None and same_file(file, out):
        fail(f"refusing to write the export over the transcript {file}", code=USAGE_ERROR)
    data = read_input(file)
    session = pi_session_or_none(file, data, file_format)
    if session is not None:
        try:
            body = pi_request(session, leaf=leaf)
        except AgentbusError as error:
            fail(f"{file}: {error}")
        _check_placeholders(file, body, training=training)
        text, replaced = well_formed_json(body)
        if replaced:
            typer.echo(f"agentbus: {file}: replaced {replaced} lone surrogate(s) with U+FFFD in the output", err=True)
        _write_output(text + "\n", out)
        return
    try:
        view = api_view_of_transcript(data, leaf=leaf)
        require_conversation(data, view.resumed)
    except AgentbusError as error:
        fail(f"{file}: {error}")
    _check_placeholders(file, view.messages_body, training=training)
    for notice in read_notices(file, view.resumed):
        typer.echo(notice, err=True)
    text, surrogate_notice = encoded_body(file, view)
    if surrogate_notice:
        typer.echo(surrogate_notice, err=True)
    _write_output(text + "\n", out)


def _write_output(text: str, out: Path | None) -> None:
    if out is None:
        sys.stdout.write(text)
    else:
        write_file_atomically(out, text.encode("utf-8"))


def _check_placeholders(file: Path, body: MessagesRequest, *, training: bool) -> None:
    """Refuse (--training) or warn about the synthetic placeholder result in the exported view."""
    places = placeholder_locations(body)
    if places:
        where = ", ".join(places[:5]) + (f" (+{len(places) - 5} more)" if len(places) > 5 else "")
        message = (
            f"{file}: the API view contains the synthetic tool_result placeholder "
            f"{SYNTHETIC_TOOL_RESULT_PLACEHOLDER!r} at {where}: it satisfies tool_use/tool_result pairing "
            "with fake content"
        )
        if training:
            fail(f"refusing training export: {message}")
        typer.echo(f"agentbus: warning: {message}", err=True)


@app.command()
def convert(
    file: FileArgument,
    to: Annotated[TranscriptFormat, typer.Option("--to", help="The format to write: pi or claude-code.")],
    out: Annotated[Path | None, typer.Option("--out", help="Write the JSONL here instead of stdout.")] = None,
    file_format: FormatOption = None,
    cwd: Annotated[
        str | None,
        typer.Option("--cwd", help="The working directory the pi header names (default: the transcript's cwd)."),
    ] = None,
) -> None:
    """Convert FILE between a pi session and a Claude Code transcript (P10), as JSONL. pi → Claude Code
    keeps what Claude Code has no field for under each line's `pi` key, so converting back gives the pi
    session again (JSON-equal); a Claude Code transcript becomes a v3 pi session by the natural mapping,
    each reply's per-block lines one pi assistant message, the Claude Code lines kept under each entry's
    `claudeCode` key (converting back gives them again). pi opens a session only when its header's cwd
    exists: a warning says when it does not."""
    if out is not None and same_file(file, out):
        fail(f"refusing to write the conversion over {file}", code=USAGE_ERROR)
    data = read_input(file)
    source = transcript_format(data, file_format)
    if source == to:
        fail(f"{file} is already a {to} file", code=USAGE_ERROR)
    if source == "pi":
        session = _read_pi(file, data)
        lines = session_to_claude_code(session.header.to_wire(), [entry.to_wire() for entry in session.entries])
        for notice in pi_notices(file, session):
            typer.echo(notice, err=True)
    else:
        lines = _claude_code_to_pi(file, data, cwd)
        named = lines[0].get("cwd")
        if not isinstance(named, str) or not Path(named).is_dir():
            typer.echo(
                f"agentbus: warning: the pi header names cwd {named!r}, no directory here: pi will not open it "
                "(--cwd DIR names another)",
                err=True,
            )
    text = "".join(escape_lone_surrogates(dump_line(line)) + "\n" for line in lines)
    _write_output(text, out)


def _claude_code_to_pi(file: Path, data: bytes, cwd: str | None) -> list[dict[str, object]]:
    parse = read_transcript(data)
    if parse.errors:
        numbers = ", ".join(str(error.line_number) for error in parse.errors)
        typer.echo(f"agentbus: {file}: skipped malformed line(s) {numbers}", err=True)
    objects = [json.loads(dump) for dump in (numbered.raw for numbered in parse.lines)]
    if not objects:
        fail(f"{file}: no transcript line to convert")
    header, entries = claude_code_to_session(objects, cwd=cwd)
    return [header, *entries]
