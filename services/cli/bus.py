"""Bus commands: ``worker``, ``up``, ``send``, ``tail``, ``replay``, ``streams``, ``dlq``."""

from __future__ import annotations

import asyncio
import json
import sys
import uuid
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from services.cli.common import fail, read_input
from services.cli.formats import FormatOption
from services.client import AgentbusClient
from services.runtime.deadletter import dead_letter_streams, list_dead_letters, replay_dead_letter, show_dead_letter
from services.runtime.settings import Settings
from services.runtime.stream_admin import init_streams, stream_report
from services.runtime.topology import Topology
from services.transcripts.pi_view import TranscriptFormat
from services.workers import WORKER_FACTORIES, run_worker
from shared.events import LogEntry
from shared.pi.claude_code import ClaudeCodeToPi
from shared.pi.session import dump_line
from shared.session_ids import session_id_problem
from shared.transcript.unicode_text import escape_lone_surrogates

if TYPE_CHECKING:
    from services.replay import ReplayReport

streams_app = typer.Typer(
    name="streams", help="Create and inspect the pipeline's streams and groups.", no_args_is_help=True
)
dlq_app = typer.Typer(name="dlq", help="Inspect and replay dead letters.", no_args_is_help=True)


def checked_session_id(value: str | None) -> str | None:
    """Typer callback: a session id outside the grammar (shared/session_ids.py) is a usage error."""
    if value is not None and (problem := session_id_problem(value)) is not None:
        raise typer.BadParameter(f"invalid session id {value!r}: {problem}")
    return value


def worker_command(
    name: Annotated[str, typer.Argument(help=f"One of: {', '.join(WORKER_FACTORIES)}.")],
    port: Annotated[int | None, typer.Option("--port", help="HTTP port of /metrics, /healthz, /readyz.")] = None,
) -> None:
    """Run one worker process (scale by running more of them)."""
    if name not in WORKER_FACTORIES:
        fail(f"unknown worker {name!r}; choose one of {', '.join(WORKER_FACTORIES)}", code=2)
    run_worker(name, port=port)


def send_command(
    session: Annotated[str, typer.Argument(help="Session id.", callback=checked_session_id)],
    text: Annotated[str, typer.Argument(help="The prompt.")],
    wait: Annotated[bool, typer.Option("--wait", help="Wait for the session's next API request and print it.")] = False,
    timeout_s: Annotated[float, typer.Option("--timeout", help="Seconds to wait with --wait.")] = 30.0,
) -> None:
    """Publish a user prompt to SESSION."""

    async def run() -> None:
        async with AgentbusClient.connect() as bus:
            before = await bus.latest_request(session)
            entry_id = await bus.send_prompt(session, text)
            typer.echo(f"sent {entry_id}", err=True)
            if wait:
                request = await bus.next_request(session, after_seq=before.seq if before else 0, timeout_s=timeout_s)
                sys.stdout.write(json.dumps(request.request, ensure_ascii=False) + "\n")

    asyncio.run(run())


def tail_command(
    session: Annotated[str, typer.Argument(help="Session id.", callback=checked_session_id)],
    follow: Annotated[bool, typer.Option("--follow", "-f", help="Keep printing new events.")] = False,
    raw: Annotated[bool, typer.Option("--json", help="Print each log entry as JSON.")] = False,
    file_format: Annotated[
        TranscriptFormat | None,
        typer.Option("--format", help="pi: print the log as pi session entries (JSONL, P10 mapping)."),
    ] = None,
) -> None:
    """Print SESSION's canonical event log."""
    as_pi = ClaudeCodeToPi() if file_format == "pi" else None

    def show(entry: LogEntry) -> None:
        if as_pi is not None:
            for pi_entry in as_pi.entries(entry.message.to_wire()):
                typer.echo(escape_lone_surrogates(dump_line(pi_entry)))
        else:
            typer.echo(entry.to_wire_json() if raw else describe(entry.seq, entry.message.to_wire()))

    async def run() -> None:
        async with AgentbusClient.connect() as bus:
            if not follow:
                for entry in await bus.history(session):
                    show(entry)
                return
            async for entry in bus.follow(session):
                show(entry)

    asyncio.run(run())


def describe(seq: int, message: dict[str, Any]) -> str:
    """One human line per log entry: seq, kind, and a short summary of its content."""
    kind = str(message.get("type"))
    if kind == "system":
        kind = f"system:{message.get('subtype')}"
    body = message.get("message")
    summary = ""
    if isinstance(body, dict):
        content = body.get("content")
        if isinstance(content, str):
            summary = content
        elif isinstance(content, list):
            summary = " | ".join(_block_summary(block) for block in content if isinstance(block, dict))
    elif kind == "tombstone" and isinstance(body, dict | type(None)):
        summary = f"retracts {message.get('message', {}).get('uuid')}"
    elif "content" in message:
        summary = str(message["content"])
    elif "data" in message:
        summary = str(message["data"].get("type"))
    summary = summary.replace("\n", " ")
    return f"{seq:>5} {kind:<22} {summary[:140]}"


def _block_summary(block: dict[str, Any]) -> str:
    kind = block.get("type")
    if kind == "text":
        return str(block.get("text", ""))
    if kind == "tool_use":
        return f"tool_use {block.get('name')}({json.dumps(block.get('input'), ensure_ascii=False)[:60]})"
    if kind == "tool_result":
        content = block.get("content")
        text = content if isinstance(content, str) else json.dumps(content, ensure_ascii=False)
        return f"tool_result{' (error)' if block.get('is_error') else ''} {text[:60]}"
    return str(kind)


def replay_command(
    file: Annotated[Path, typer.Argument(help="A Claude Code (or agentbus) JSONL transcript, or a pi session.")],
    session: Annotated[
        str | None,
        typer.Option("--session", help="Session id on the bus (default: new).", callback=checked_session_id),
    ] = None,
    timeout_s: Annotated[float, typer.Option("--timeout", help="Seconds to wait until it is persisted.")] = 120.0,
    wait_all: Annotated[
        bool, typer.Option("--wait", help="Also wait until every group of the session's log shard has settled it.")
    ] = False,
    file_format: FormatOption = None,
) -> None:
    """Push a recorded session through the bus as its producers would (recorded tool results included),
    wait until the transcript worker has persisted it (--wait: every group, the normalizer too), and
    print the session id and transcript path. A summary on stderr says how many lines were read, how
    many events published and which lines were skipped and why. An empty, binary or non-JSONL file, or
    one without a conversation, is refused (file, line, reason; exit 1). A pi session file publishes its
    context at the last entry as Claude Code messages (the ones `agentbus normalize FILE` builds on)."""
    from services.cli.progress import phase_progress
    from services.replay import plan_replay, replay_transcript
    from shared.errors import UnusableTranscript

    data = read_input(file)
    try:
        plan = plan_replay(data, file_format)
    except UnusableTranscript as error:
        fail(f"{file}: {error}")
    settings = Settings()
    session_id = session or str(uuid.uuid4())
    labels = {"publish": "events published", "ingress": "settled by {detail}", "log": "settled by {detail}"}

    async def run() -> ReplayReport:
        async with AgentbusClient.connect(settings.redis_url) as bus:
            with phase_progress(labels) as progress:
                return await replay_transcript(
                    bus,
                    plan,
                    session_id=session_id,
                    settings=settings,
                    timeout_s=timeout_s,
                    wait_all=wait_all,
                    progress=progress,
                )

    try:
        report = asyncio.run(run())
    except TimeoutError as error:
        fail(str(error))
    typer.echo(f"agentbus: {file}: {report.summary()}", err=True)
    typer.echo(session_id)
    typer.echo(str(report.transcript))


@streams_app.command("init")
def streams_init() -> None:
    """Create every stream and consumer group (run before KEDA scalers read the groups)."""
    settings = Settings()

    async def run() -> int:
        async with AgentbusClient.connect(settings.redis_url) as bus:
            return await init_streams(bus.redis, Topology(settings.names))

    created = asyncio.run(run())
    typer.echo(f"{created} consumer group(s) ensured")


@streams_app.command("info")
def streams_info(as_json: Annotated[bool, typer.Option("--json")] = False) -> None:
    """Length, lag, pending and oldest pending age of every stream and group."""
    settings = Settings()

    async def run() -> list[dict[str, Any]]:
        async with AgentbusClient.connect(settings.redis_url) as bus:
            return await stream_report(bus.redis, Topology(settings.names))

    rows = asyncio.run(run())
    if as_json:
        typer.echo(json.dumps(rows))
        return
    typer.echo(f"{'stream':<40} {'group':<16} {'length':>8} {'lag':>8} {'pending':>8}")
    for row in rows:
        lag = row["lag"] if row["lag"] is not None else "-"
        typer.echo(f"{row['stream']:<40} {row['group'] or '-':<16} {row['length']:>8} {lag:>8} {row['pending']:>8}")


@dlq_app.command("ls")
def dlq_ls(limit: Annotated[int, typer.Option("--limit")] = 20) -> None:
    """List dead letters of every dead-letter stream (newest last)."""
    settings = Settings()

    async def run() -> None:
        async with AgentbusClient.connect(settings.redis_url) as bus:
            for stream in await dead_letter_streams(bus.redis, settings.names):
                for letter in await list_dead_letters(bus.redis, stream, count=limit):
                    where = f"{letter.stream} {letter.entry_id}"
                    typer.echo(f"{stream} {letter.dlq_id} {letter.reason:<24} {where} {letter.detail[:80]}")

    asyncio.run(run())


@dlq_app.command("show")
def dlq_show(stream: str, dlq_id: str) -> None:
    """Show one dead letter with its history and original fields."""
    settings = Settings()

    async def run() -> None:
        async with AgentbusClient.connect(settings.redis_url) as bus:
            letter = await show_dead_letter(bus.redis, stream, dlq_id)
            if letter is None:
                fail(f"no dead letter {dlq_id} in {stream}")
            body = letter.model_dump(mode="json", exclude={"fields"})
            body["fields"] = letter.text_fields()
            typer.echo(json.dumps(body, indent=2, ensure_ascii=False))

    asyncio.run(run())


@dlq_app.command("replay")
def dlq_replay(stream: str, dlq_id: str) -> None:
    """Write a dead letter back to its original stream (after fixing the cause) and remove it."""
    settings = Settings()

    async def run() -> str | None:
        async with AgentbusClient.connect(settings.redis_url) as bus:
            return await replay_dead_letter(bus.redis, stream, dlq_id)

    new_id = asyncio.run(run())
    if new_id is None:
        fail(f"no dead letter {dlq_id} in {stream}")
    typer.echo(new_id)
