"""``agentbus transcript verify | repair | export``: integrity checks, repaired copies and training
exports of Claude Code JSONL transcripts. The input file is only ever read."""

from __future__ import annotations

import dataclasses
import json
import sys
from pathlib import Path
from typing import Annotated

import typer

from services.cli.common import USAGE_ERROR, fail, read_input, same_file
from services.transcripts.api_view import (
    api_view_of_transcript,
    encoded_body,
    placeholder_locations,
    read_notices,
    require_conversation,
)
from services.transcripts.files import write_file_atomically
from shared.constants import SYNTHETIC_TOOL_RESULT_PLACEHOLDER
from shared.errors import AgentbusError
from shared.transcript import IntegrityIssue, IntegrityReport, TranscriptParse, read_transcript
from shared.transcript import repair_transcript as repair_lines
from shared.transcript import verify_transcript as verify_lines

app = typer.Typer(name="transcript", help="Verify, repair and export JSONL transcripts.", no_args_is_help=True)

FileArgument = Annotated[Path, typer.Argument(help="A Claude Code (or agentbus) JSONL transcript.")]
_MAX_LISTED_LINES = 12


def _where(line_numbers: tuple[int, ...]) -> str:
    if len(line_numbers) == 1:
        return f"line {line_numbers[0]}"
    listed = ", ".join(str(number) for number in line_numbers[:_MAX_LISTED_LINES])
    more = len(line_numbers) - _MAX_LISTED_LINES
    return f"lines {listed}" + (f" (+{more} more)" if more > 0 else "")


def format_issue(issue: IntegrityIssue) -> str:
    """``line 14: error malformed_line: missing_type: no string `type` field``."""
    detail = issue.detail
    if len(issue.line_numbers) == 1:
        detail = detail.removeprefix(f"line {issue.line_numbers[0]}: ")
    return f"{_where(issue.line_numbers)}: {issue.severity} {issue.kind}: {detail}"


def _report_json(file: Path, parse: TranscriptParse, report: IntegrityReport) -> str:
    return json.dumps(
        {
            "file": str(file),
            "ok": report.ok,
            "line_count": parse.line_count,
            "torn_tail": parse.torn_tail,
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
) -> None:
    """Report chain breaks, cycles, duplicate uuids, unpaired tool_use / orphan tool_result, placeholder
    results and malformed lines, with line numbers. Exit 1 when there is any error, 0 otherwise."""
    parse = read_transcript(read_input(file))
    report = verify_lines(parse)
    if as_json:
        typer.echo(_report_json(file, parse, report))
    else:
        for issue in report.issues:
            typer.echo(format_issue(issue))
        verdict = "OK" if report.ok else "FAILED"
        typer.echo(
            f"{file}: {verdict}: {parse.line_count} lines, {len(report.errors)} error(s), "
            f"{len(report.warnings)} warning(s)"
        )
    raise typer.Exit(0 if report.ok else 1)


@app.command()
def repair(
    file: FileArgument,
    out: Annotated[Path, typer.Option("--out", help="Where to write the repaired copy (never FILE).")],
    force: Annotated[bool, typer.Option("--force", help="Overwrite OUT if it exists.")] = False,
) -> None:
    """Write a repaired copy of FILE to OUT: malformed and duplicate lines dropped, broken or cyclic
    parent chains re-linked. The original is never edited."""
    if same_file(file, out):
        fail(f"refusing to write the repair over the original {file}; choose another --out", code=USAGE_ERROR)
    if out.exists() and not force:
        fail(f"{out} exists; pass --force to overwrite it", code=USAGE_ERROR)
    result = repair_lines(read_transcript(read_input(file)))
    write_file_atomically(out, result.text.encode("utf-8"))
    for action in result.actions:
        typer.echo(f"line {action.line_number}: {action.kind}: {action.detail}")
    for issue in result.report.of_kind("invalid_utf8"):  # those bytes are written as U+FFFD
        typer.echo(format_issue(issue))
    remaining = verify_lines(read_transcript(result.text))
    typer.echo(
        f"{file} → {out}: {len(result.lines)} lines written, {len(result.actions)} repair(s), "
        f"{len(remaining.errors)} error(s) left"
    )


@app.command()
def export(
    file: FileArgument,
    training: Annotated[
        bool, typer.Option("--training", help="Refuse sessions whose API view holds synthetic placeholder results.")
    ] = False,
    out: Annotated[Path | None, typer.Option("--out", help="Write the JSON here instead of stdout.")] = None,
    leaf: Annotated[str | None, typer.Option("--leaf", help="Export the chain ending at this uuid.")] = None,
) -> None:
    """Export the session's API view (the resumed chain, normalized) as {"messages": [...]} JSON. An empty,
    binary or non-JSONL file, or one without a conversation, is refused (file, line, reason; exit 1)."""
    if out is not None and same_file(file, out):
        fail(f"refusing to write the export over the transcript {file}", code=USAGE_ERROR)
    data = read_input(file)
    try:
        view = api_view_of_transcript(data, leaf=leaf)
        require_conversation(data, view.resumed)
    except AgentbusError as error:
        fail(f"{file}: {error}")
    places = placeholder_locations(view.messages_body)
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
    for notice in read_notices(file, view.resumed):
        typer.echo(notice, err=True)
    text, surrogate_notice = encoded_body(file, view)
    if surrogate_notice:
        typer.echo(surrogate_notice, err=True)
    text += "\n"
    if out is None:
        sys.stdout.write(text)
    else:
        write_file_atomically(out, text.encode("utf-8"))
