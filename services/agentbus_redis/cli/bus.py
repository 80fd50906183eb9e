"""Bus commands: ``worker``, ``send``, ``tail``, ``replay``, ``streams``, ``dlq``.

Only typer and the standard library are imported here: the SDK, redis and the workers load inside the
command that needs them, so ``agentbus --help`` (and every other command) does not pay for them.
Connection and Redis errors are left to the CLI's error boundary (cli/errors.py).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
import signal
import sys
import uuid
from collections.abc import Callable, Coroutine
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from agentbus_redis.cli.common import USAGE_ERROR, checked_session_id, fail, read_input, resume_hint
from agentbus_redis.cli.formats import FormatOption
from agentbus_redis.pi.constants import TranscriptFormat

if TYPE_CHECKING:
    from agentbus_redis.bus.events import LogEntry
    from agentbus_redis.config.settings import Settings
    from agentbus_redis.sdk.client import AgentbusClient
    from agentbus_redis.sdk.replay import ReplayReport

streams_app = typer.Typer(
    name="streams", help="Create and inspect the pipeline's streams and groups.", no_args_is_help=True
)
dlq_app = typer.Typer(name="dlq", help="Inspect and replay dead letters.", no_args_is_help=True)

WORKER_NAMES_HELP = "ingestion, tools, normalization, transcripts, model or console"
_STREAM_ID = re.compile(r"^\d+(-\d+)?$")


def _connect() -> AgentbusClient:
    """The SDK client on the configured Redis (``--redis-url`` / ``REDIS_URL`` / ``.env``)."""
    from agentbus_redis.sdk.client import AgentbusClient

    return AgentbusClient.connect()


def worker_command(
    name: Annotated[str, typer.Argument(help=f"One of: {WORKER_NAMES_HELP}.")],
    port: Annotated[
        int | None,
        typer.Option(
            "--port",
            envvar="AGENTBUS_HTTP_PORT",
            show_envvar=True,
            help="HTTP port of /metrics, /healthz, /readyz [default: a free one, printed on stderr].",
        ),
    ] = None,
    mcp_config: Annotated[
        list[Path] | None,
        typer.Option(
            "--mcp-config",
            help="tools: an MCP server config (Claude Code's .mcp.json format) whose servers this worker connects "
            "to (repeatable; added to AGENTBUS_TOOLS__MCP_CONFIG).",
        ),
    ] = None,
    tools: Annotated[
        list[str] | None,
        typer.Option(
            "--tools",
            help="tools worker: load Python tools from 'package.module:attribute' (a tool, a list of tools or a "
            "registry; repeatable; added to AGENTBUS_TOOLS__MODULES).",
        ),
    ] = None,
    pool: Annotated[
        str | None,
        typer.Option(
            "--pool",
            help="tools worker: the pool it serves (calls of its tools are routed there) [AGENTBUS_TOOLS__POOL].",
        ),
    ] = None,
    builtins: Annotated[
        bool | None,
        typer.Option(
            "--builtins/--no-builtins",
            help="tools worker: also run the built-in tools (Read … Bash, Agent, SendMessage) "
            "[AGENTBUS_TOOLS__BUILTINS].",
        ),
    ] = None,
) -> None:
    """Run one worker process (scale by running more of them); ``console`` serves the web console."""
    if name == "console":
        from agentbus_redis.console.server import run_console

        run_console(port=port)
        return
    from agentbus_redis.workers.registry import WORKER_FACTORIES, run_worker

    if name not in WORKER_FACTORIES:
        fail(f"unknown worker {name!r}; choose one of {', '.join(WORKER_FACTORIES)}", code=USAGE_ERROR)
    if name != "tools":
        if tools or pool is not None or builtins is not None or mcp_config:
            fail(
                "--tools, --pool, --builtins and --mcp-config are options of `agentbus worker tools`", code=USAGE_ERROR
            )
        run_worker(name, port=port)
        return
    run_worker(name, _tool_worker_settings(tools or [], pool, builtins, mcp_config or []), port=port)


def _tool_worker_settings(
    modules: list[str], pool: str | None, builtins: bool | None, mcp_config: list[Path]
) -> Settings:
    """The settings with the command line's tool options on top, its tools loaded and its MCP configs read once to
    check them: a source that does not load, or a bad MCP config, is one line and exit code 2, before the worker
    starts."""
    from agentbus_redis.config.settings import Settings
    from agentbus_redis.mcp.config import McpConfigError
    from agentbus_redis.tools.pools import pool_name_problem
    from agentbus_redis.workers.tools.loading import ToolLoadError, load_tools
    from agentbus_redis.workers.tools.mcp.config_files import read_mcp_configs

    settings = Settings()
    update: dict[str, Any] = {
        "modules": [*settings.tools.modules, *modules],
        "mcp_config": [*settings.tools.mcp_config, *mcp_config],
    }
    if pool is not None:
        if (problem := pool_name_problem(pool)) is not None:
            fail(f"--pool: {problem}", code=USAGE_ERROR)
        update["pool"] = pool
    if builtins is not None:
        update["builtins"] = builtins
    tool_settings = settings.tools.model_copy(update=update)
    try:
        loaded = load_tools(tool_settings.modules, entry_points=tool_settings.entry_points)
        read_mcp_configs(tool_settings.mcp_config)
    except (ToolLoadError, McpConfigError) as error:
        fail(str(error), code=USAGE_ERROR)
    if not loaded and not tool_settings.builtins and not tool_settings.mcp_config:
        fail("--no-builtins: this worker would run no tool (load some with --tools or --mcp-config)", code=USAGE_ERROR)
    return settings.model_copy(update={"tools": tool_settings})


def send_command(
    session: Annotated[str, typer.Argument(help="Session id.", callback=checked_session_id)],
    text: Annotated[str, typer.Argument(help="The prompt.")],
    wait: Annotated[bool, typer.Option("--wait", help="Wait for the session's next API request and print it.")] = False,
    timeout_s: Annotated[
        float | None,
        typer.Option("--timeout", help="Seconds to wait with --wait [30]; with --follow, for any progress [300]."),
    ] = None,
    follow: Annotated[
        bool,
        typer.Option(
            "--follow", "-f", help="Print the model's turn as it streams, like `agentbus chat SESSION PROMPT`."
        ),
    ] = False,
) -> None:
    """Publish a user prompt to SESSION (--follow: and print the turn it starts, with chat's exit codes)."""
    if follow:
        from agentbus_redis.cli.chat import run_one_turn

        raise typer.Exit(run_one_turn(session, text, timeout_s=300.0 if timeout_s is None else timeout_s))
    wait_s = 30.0 if timeout_s is None else timeout_s

    async def run() -> None:
        async with _connect() as bus:
            before = await bus.latest_request(session)
            entry_id = await bus.send_prompt(session, text)
            if not wait:
                typer.echo(f"sent {entry_id}", err=True)
                return
            try:
                request = await bus.next_request(session, after_seq=before.seq if before else 0, timeout_s=wait_s)
            except TimeoutError as error:
                fail(f"{error}; prompt {entry_id} is queued: are the workers running? (`agentbus up` starts them)")
            typer.echo(f"sent {entry_id}", err=True)
            sys.stdout.write(json.dumps(request.request, ensure_ascii=False) + "\n")

    asyncio.run(run())


def tail_command(
    session: Annotated[str, typer.Argument(help="Session id.", callback=checked_session_id)],
    follow: Annotated[
        bool, typer.Option("--follow", "-f", help="Keep printing new events (waits for a session not yet seen).")
    ] = False,
    raw: Annotated[bool, typer.Option("--json", help="Print each log entry as JSON.")] = False,
    file_format: Annotated[
        TranscriptFormat | None,
        typer.Option("--format", help="pi: print the log as pi session entries (JSONL, P10 mapping)."),
    ] = None,
    tree: Annotated[
        bool, typer.Option("--tree", help="Also print the sub-agent sessions SESSION started, each under a heading.")
    ] = False,
) -> None:
    """Print SESSION's canonical event log; exit 1 when the bus has never seen SESSION."""
    show = entry_printer(raw=raw, as_pi=file_format == "pi")

    async def run() -> None:
        async with _connect() as bus:
            if tree:
                from agentbus_redis.cli.tail_tree import tail_tree

                if not follow and not await _known_session(bus, session):
                    fail(f"{_no_session(session)} (`agentbus send {session} TEXT` starts it)")
                work = tail_tree(
                    bus,
                    session,
                    lambda label: entry_printer(raw=raw, as_pi=file_format == "pi", prefix=label),
                    follow=follow,
                    echo=typer.echo,
                )
                await (_until_interrupted(work) if follow else work)
                return
            if follow:
                await _until_interrupted(_print_followed(bus, session, show))
                return
            entries = await bus.history(session)
            if not entries and not await _known_session(bus, session):
                fail(f"{_no_session(session)} (`agentbus send {session} TEXT` starts it)")
            for entry in entries:
                show(entry)

    asyncio.run(run())


def _no_session(session: str) -> str:
    from agentbus_redis.cli.errors import redis_url_in_use

    return f"no session {session!r} on {redis_url_in_use()}"


async def _known_session(bus: AgentbusClient, session: str) -> bool:
    """Whether ingestion ever registered ``session`` (its event log may be empty or trimmed)."""
    return await bus.redis.zscore(bus.topology.sessions(bus.topology.names.shard_of(session)), session) is not None


async def _print_followed(bus: AgentbusClient, session: str, show: Callable[[LogEntry], None]) -> None:
    if not await _known_session(bus, session):
        typer.echo(f"agentbus: {_no_session(session)} yet; waiting for it", err=True)
    async for entry in bus.follow(session):
        show(entry)


def entry_printer(*, raw: bool, as_pi: bool, prefix: str = "") -> Callable[[LogEntry], None]:
    """How ``tail`` prints one log entry: a summary line, the entry as JSON (``--json``), or the pi session
    entries its message maps to (``--format pi``, P10; tool names remembered across entries); each line
    after ``prefix`` (``tail --tree -f``: the session's agentId)."""
    if not as_pi:
        return lambda entry: typer.echo(
            prefix + (entry.to_wire_json() if raw else describe(entry.seq, entry.message.to_wire()))
        )
    from agentbus_redis.pi.claude_code import ClaudeCodeToPi
    from agentbus_redis.pi.session import dump_line
    from agentbus_redis.transcript.unicode_text import escape_lone_surrogates

    mapping = ClaudeCodeToPi()

    def show(entry: LogEntry) -> None:
        for pi_entry in mapping.entries(entry.message.to_wire()):
            typer.echo(prefix + escape_lone_surrogates(dump_line(pi_entry)))

    return show


async def _until_interrupted(work: Coroutine[Any, Any, None]) -> None:
    """Run ``work`` until it ends or Ctrl-C / SIGTERM arrives; the signal exits 130, quietly.

    The signal only sets an event (a loop callback), and ``work`` is cancelled while it awaits Redis.
    asyncio.run's own SIGINT handling cancels the task wherever it runs, and redis-py 8 loses a cancel
    requested before a command suspends: ``tail -f`` ignored the first Ctrl-C.
    """
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    for signum in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(signum, stop.set)
    worker = asyncio.ensure_future(work)
    stopper = asyncio.ensure_future(stop.wait())
    await asyncio.wait({worker, stopper}, return_when=asyncio.FIRST_COMPLETED)
    if worker.done():
        stopper.cancel()
        return worker.result()
    worker.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await worker
    raise typer.Exit(130)


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
    elif kind.startswith("system:task_"):
        summary = _task_summary(message)
    elif kind == "tombstone" and isinstance(body, dict | type(None)):
        summary = f"retracts {message.get('message', {}).get('uuid')}"
    elif "content" in message:
        summary = str(message["content"])
    elif "data" in message:
        summary = str(message["data"].get("type"))
    summary = summary.replace("\n", " ")
    return f"{seq:>5} {kind:<22} {summary[:140]}"


def _task_summary(message: dict[str, Any]) -> str:
    """A6.3 task events: the agentId, then what happened (``tail``'s sub-agent lines)."""
    usage = message.get("usage")
    counts = ""
    if isinstance(usage, dict):
        counts = f" (tokens {usage.get('total_tokens')}, tools {usage.get('tool_uses')}, {usage.get('duration_ms')} ms)"
    task = message.get("task_id")
    match message.get("subtype"):
        case "task_started":
            return f"{task} {message.get('task_type')}: {message.get('description')}"
        case "task_progress":
            return f"{task} {message.get('last_tool_name')}{counts}"
        case _:
            return f"{task} {message.get('status')}: {message.get('summary')}{counts}"


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
    continue_turn: Annotated[
        bool,
        typer.Option(
            "--continue-turn",
            help="Once the recording is in, let the model answer if the session waits for it (default: no "
            "model call and no tool run, the replay is a recording).",
        ),
    ] = False,
) -> None:
    """Push a recorded session through the bus as its producers would (recorded tool results included),
    wait until the transcript worker has persisted it (--wait: every group, the normalizer too), and
    print the session id and transcript path. No model request is published and no tool runs during the
    replay (--continue-turn: the model answers at the end if the session waits for it). On stderr, how to
    open the transcript in Claude Code (`cd CWD && claude --resume UUID`). A summary on stderr says how
    many lines were read, how many events published and which lines were skipped and why. An empty,
    binary or non-JSONL file, or one without a conversation, is refused (file, line, reason; exit 1). A
    pi session file publishes its context at the last entry as Claude Code messages (the ones `agentbus
    normalize FILE` builds on)."""
    from agentbus_redis.cli.progress import phase_progress
    from agentbus_redis.config.settings import Settings
    from agentbus_redis.errors import UnusableTranscript
    from agentbus_redis.sdk.replay import plan_replay, replay_transcript

    data = read_input(file)
    try:
        plan = plan_replay(data, file_format)
    except UnusableTranscript as error:
        fail(f"{file}: {error}")
    settings = Settings()
    session_id = session or str(uuid.uuid4())
    labels = {"publish": "events published", "ingress": "settled by {detail}", "log": "settled by {detail}"}

    async def run() -> ReplayReport:
        async with _connect() as bus:
            with phase_progress(labels) as progress:
                return await replay_transcript(
                    bus,
                    plan,
                    session_id=session_id,
                    settings=settings,
                    timeout_s=timeout_s,
                    wait_all=wait_all,
                    progress=progress,
                    continue_turn=continue_turn,
                )

    try:
        report = asyncio.run(run())
    except TimeoutError as error:
        fail(str(error))
    typer.echo(f"agentbus: open it in Claude Code: {resume_hint(report.cwd, report.claude_session_id)}", err=True)
    typer.echo(f"agentbus: {file}: {report.summary()}", err=True)
    typer.echo(session_id)
    typer.echo(str(report.transcript))


@streams_app.command("init")
def streams_init() -> None:
    """Create every stream and consumer group (run before KEDA scalers read the groups)."""
    from agentbus_redis.runtime.stream_admin import init_streams

    async def run() -> int:
        async with _connect() as bus:
            return await init_streams(bus.redis, bus.topology)

    created = asyncio.run(run())
    typer.echo(f"{created} consumer group(s) ensured")


def _seconds(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f}s"


@streams_app.command("info")
def streams_info(as_json: Annotated[bool, typer.Option("--json", help="Print the rows as JSON.")] = False) -> None:
    """Length, lag, pending and oldest pending age of every stream and group (on a cluster, the node of each)."""
    from agentbus_redis.runtime.stream_admin import stream_report

    async def run() -> list[dict[str, Any]]:
        async with _connect() as bus:
            return await stream_report(bus.redis, bus.topology)

    rows = asyncio.run(run())
    if as_json:
        typer.echo(json.dumps(rows))
        return
    node = any(row["node"] for row in rows)  # a cluster: say which node serves each shard
    where = f" {'node':<21}" if node else ""
    typer.echo(f"{'stream':<40}{where} {'group':<16} {'length':>8} {'lag':>8} {'pending':>8} {'oldest pending':>15}")
    for row in rows:
        lag = row["lag"] if row["lag"] is not None else "-"
        at = f" {row['node']:<21}" if node else ""
        typer.echo(
            f"{row['stream']:<40}{at} {row['group'] or '-':<16} {row['length']:>8} {lag:>8} {row['pending']:>8} "
            f"{_seconds(row['oldest_pending_s']):>15}"
        )


@dlq_app.command("ls")
def dlq_ls(
    limit: Annotated[int, typer.Option("--limit", min=1, help="Newest dead letters shown per stream.")] = 20,
) -> None:
    """List the newest dead letters of every dead-letter stream (oldest of them first)."""
    from agentbus_redis.streams.deadletter import dead_letter_streams, newest_dead_letters

    async def run() -> list[tuple[str, str, str, str, str]]:
        async with _connect() as bus:
            return [
                (stream, letter.dlq_id or "-", letter.reason, f"{letter.stream} {letter.entry_id}", letter.detail[:80])
                for stream in await dead_letter_streams(bus.redis, bus.topology.names)
                for letter in await newest_dead_letters(bus.redis, stream, count=limit)
            ]

    rows = asyncio.run(run())
    if not rows:
        typer.echo("agentbus: no dead letters", err=True)
        return
    typer.echo(f"{'dead-letter stream':<40} {'id':<16} {'reason':<24} {'source entry':<56} detail")
    for stream, dlq_id, reason, source, detail in rows:
        typer.echo(f"{stream:<40} {dlq_id:<16} {reason:<24} {source:<56} {detail}")


DlqStream = Annotated[str, typer.Argument(help="The dead-letter stream (`agentbus dlq ls` lists them).")]
DlqId = Annotated[str, typer.Argument(help="The dead letter's entry id in that stream.")]


def _check_entry_id(dlq_id: str) -> None:
    if not _STREAM_ID.match(dlq_id):
        fail(f"{dlq_id!r} is not a stream entry id (like 1712345678901-0)", code=USAGE_ERROR)


@dlq_app.command("show")
def dlq_show(stream: DlqStream, dlq_id: DlqId) -> None:
    """Show one dead letter with its history and original fields."""
    from agentbus_redis.streams.deadletter import show_dead_letter

    _check_entry_id(dlq_id)

    async def run() -> None:
        async with _connect() as bus:
            letter = await show_dead_letter(bus.redis, stream, dlq_id)
            if letter is None:
                fail(f"no dead letter {dlq_id} in {stream}")
            body = letter.model_dump(mode="json", exclude={"fields"})
            body["fields"] = letter.text_fields()
            typer.echo(json.dumps(body, indent=2, ensure_ascii=False))

    asyncio.run(run())


@dlq_app.command("replay")
def dlq_replay(stream: DlqStream, dlq_id: DlqId) -> None:
    """Write a dead letter back to its original stream (after fixing the cause) and remove it."""
    from agentbus_redis.streams.deadletter import replay_dead_letter

    _check_entry_id(dlq_id)

    async def run() -> str | None:
        async with _connect() as bus:
            return await replay_dead_letter(bus.redis, stream, dlq_id)

    new_id = asyncio.run(run())
    if new_id is None:
        fail(f"no dead letter {dlq_id} in {stream}")
    typer.echo(new_id)
