"""``agentbus up``: every worker as its own supervised process, a private Redis when no Redis is configured
and none answers on the default address, and the demo session on an empty system.

Which Redis: the one ``REDIS_URL`` (or ``AGENTBUS_REDIS_URL``, ``--redis-url``, ``.env``) names whenever it is
set — never replaced: while it does not answer, ``up`` waits for it (``--redis-wait``), then fails with one
line and exit 1. Only without any configured URL does ``up`` look at 127.0.0.1:``--redis-port`` (6379, the
default URL every other command uses) and, when nothing answers there, start a private ``redis-server`` on
it, with an append-only file under the data directory, supervised like a worker: restarted on the same file
when it dies, or everything stops with exit 1 and one line saying why.

Once every worker is ready and the demo (if it runs) is done, ``up`` says what to do next: the
``agentbus chat`` command to run in a second terminal, and Ctrl-C to stop (issue 27).

It stops everything on SIGINT, SIGTERM and SIGHUP (a closed terminal) — workers first, gracefully, then
the private Redis they write to — restarts a worker that dies (``local/supervisor.py``) and
exits non-zero on any failure.
"""

from __future__ import annotations

import asyncio
import os
import secrets
import signal
import sys
import time
from collections.abc import Awaitable
from pathlib import Path
from types import FrameType
from typing import Annotated, Final

import typer

from agentbus_redis.cli.errors import redacted_url
from agentbus_redis.cli.local.demo import run_demo
from agentbus_redis.cli.local.up_logs import LogFormat, WorkerLogs, console_wanted, log_file_path
from agentbus_redis.config.settings import Settings
from agentbus_redis.local.redis_server import (
    LocalRedis,
    PrivateRedisKeeper,
    RedisServerUnavailable,
    is_reachable,
    start_local_redis,
)
from agentbus_redis.local.supervisor import (
    Child,
    RestartPolicy,
    SupervisionFailed,
    Supervisor,
    bind_listener_near,
    probe_address,
)
from agentbus_redis.runtime import redis_client
from agentbus_redis.runtime.stream_admin import init_streams
from agentbus_redis.sdk.client import AgentbusClient
from agentbus_redis.streams.topology import Topology

DEMO_PERMISSIONS = '["Read", "Glob", "Grep", "Write", "Bash(ls:*)"]'
"""What `up` lets its tool workers do unless AGENTBUS_TOOLS__ALLOW says otherwise (Bash only `ls …`)."""

STOP_SIGNALS: Final = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)

DEFAULT_REDIS_WAIT_S: Final = 30.0
"""How long ``up`` waits for the Redis the user configured before it gives up."""
DEFAULT_REDIS_PORT: Final = 6379
"""The port of the default ``REDIS_URL``: a private Redis there is the one every other command finds."""
REDIS_WAIT_POLL_S: Final = 0.5
DEFAULT_REDIS_URL: Final = f"redis://127.0.0.1:{DEFAULT_REDIS_PORT}/0"
CHAT_SESSION_EXAMPLE: Final = "my-session"
"""The session id the next-step line suggests (any new id starts a session)."""


def next_step_line(redis_url: str | None) -> str:
    """Issue 27: what to do once ``up`` is up, in the README's command form. ``redis_url``: the Redis ``up``
    picked itself when it is not the default one ``chat`` finds on its own (None: the default, or the one
    the user configured, which a second terminal reads as the first did)."""
    command = f"uv run agentbus chat {CHAT_SESSION_EXAMPLE}"
    if redis_url is not None:
        command = f"REDIS_URL={redis_url} {command}"
    return f"next: open a second terminal here and run `{command}` to talk to the model; Ctrl-C here stops agentbus"


def stop_signals() -> list[signal.Signals]:
    """:data:`STOP_SIGNALS`, but SIGHUP only when not ignored: ``nohup agentbus up`` survives a hang-up,
    as it asked. (A shell starts background jobs with SIGINT ignored; Ctrl-C does not reach them anyway,
    and a ``kill -INT`` should still stop ``up``.)"""
    return [sig for sig in STOP_SIGNALS if sig != signal.SIGHUP or signal.getsignal(sig) is not signal.SIG_IGN]


class StopRequested(BaseException):
    """One of :data:`STOP_SIGNALS` arrived before the event loop took them over."""


def up_command(
    tools: Annotated[int, typer.Option("--tools", help="Number of tool-execution workers.")] = 2,
    demo: Annotated[bool, typer.Option("--demo/--no-demo", help="Run the demo session on an empty system.")] = True,
    exit_after_demo: Annotated[
        bool,
        typer.Option(
            "--exit-after-demo", help="Stop everything once the demo is done, or once ready with --no-demo (CI)."
        ),
    ] = False,
    base_port: Annotated[
        int,
        typer.Option("--base-port", help="First HTTP port (/metrics, /healthz, /readyz); a taken one is replaced."),
    ] = 9400,
    log_format: Annotated[
        LogFormat,
        typer.Option(
            "--log-format",
            help="Workers' logs shown here: auto (console on a terminal, else json), console or json; "
            "all of them go to <data dir>/logs/up.log.",
        ),
    ] = "auto",
    max_restarts: Annotated[
        int, typer.Option("--max-restarts", min=0, help="Restarts of a worker that keeps dying before giving up.")
    ] = RestartPolicy.max_restarts,
    model: Annotated[
        str | None,
        typer.Option("--model", help="Model id the model worker calls (default: AGENTBUS_MODEL__MODEL)."),
    ] = None,
    redis_wait: Annotated[
        float,
        typer.Option(
            "--redis-wait",
            min=0,
            help="Seconds to wait for the Redis REDIS_URL names to answer before giving up (exit 1).",
        ),
    ] = DEFAULT_REDIS_WAIT_S,
    redis_port: Annotated[
        int,
        typer.Option(
            "--redis-port",
            min=1,
            max=65535,
            help="Without REDIS_URL: the loopback port of the Redis used, started privately if none answers.",
        ),
    ] = DEFAULT_REDIS_PORT,
) -> None:
    """Start the five worker types (tools scaled to --tools), if needed a private Redis, and, without an
    ANTHROPIC_API_KEY, the fake model server (its demo script) for the model worker to call."""
    signals = stop_signals()
    signal_handlers = {sig: signal.signal(sig, _raise_stop) for sig in signals}
    redis_server: LocalRedis | None = None
    code = 0
    try:
        settings, env, configured = _settings_and_env()
        chat_redis_url: str | None = None
        if configured:
            _wait_for_configured_redis(settings.redis_url, redis_wait)
        else:
            url = f"redis://127.0.0.1:{redis_port}/0"
            if is_reachable(url):
                typer.echo(f"REDIS_URL is not set: using the Redis answering at {url}")
            else:
                redis_server = _start_private_redis(settings, redis_port)
                url = redis_server.url
                typer.echo(
                    f"REDIS_URL is not set and no Redis answers at 127.0.0.1:{redis_port}: started a private one "
                    f"at {url} (pid {redis_server.pid}, AOF in {redis_server.directory})"
                )
            env["REDIS_URL"] = url
            settings = settings.model_copy(update={"redis_url": url})
            chat_redis_url = url if url != DEFAULT_REDIS_URL else None
        if model is not None:
            env["AGENTBUS_MODEL__MODEL"] = model
        logs = WorkerLogs(
            log_file_path(settings.data_dir), console=console_wanted(log_format, sys.stdout), out=sys.stdout
        )
        try:
            policy = RestartPolicy(max_restarts)
            plan = UpPlan(settings, env, tools, demo, exit_after_demo, base_port, policy, signals)
            plan.fake_model = uses_fake_model(settings, env)
            plan.chat_redis_url = chat_redis_url
            if redis_server is not None:
                plan.redis_keeper = PrivateRedisKeeper(redis_server, echo=typer.echo, policy=policy)
            code = asyncio.run(plan.run(logs))
        finally:
            logs.close()
    except StopRequested:
        code = 0
    except (RedisServerUnavailable, SupervisionFailed, ConfiguredRedisUnreachable) as exc:
        typer.echo(f"agentbus up: {exc}", err=True)
        code = 1
    finally:
        for sig in signals:  # nothing interrupts the clean-up below
            signal.signal(sig, signal.SIG_IGN)
        if redis_server is not None:
            redis_server.stop()
        for sig, handler in signal_handlers.items():
            signal.signal(sig, handler)
    raise typer.Exit(code)


def _raise_stop(signum: int, frame: FrameType | None) -> None:
    raise StopRequested(signum)


def _settings_and_env() -> tuple[Settings, dict[str, str], bool]:
    """Settings with absolute paths (the workers and printed paths agree wherever they run), the demo
    workspace under the data directory unless one is configured, the workers' environment, and whether the
    user configured a Redis URL (environment or ``.env``)."""
    settings = Settings()
    configured = "redis_url" in settings.model_fields_set
    data_dir = settings.data_dir.resolve()
    tools = settings.tools
    if "workspace" not in tools.model_fields_set:
        tools = tools.model_copy(update={"workspace": data_dir / "workspace"})
    settings = settings.model_copy(update={"data_dir": data_dir, "tools": tools})
    env = {
        **os.environ,
        "AGENTBUS_DATA_DIR": str(data_dir),
        "AGENTBUS_TOOLS__WORKSPACE": str(tools.workspace.resolve()),
    }
    if configured:
        env["REDIS_URL"] = settings.redis_url  # from .env too: the workers must use that one, whatever they read
    env.setdefault("AGENTBUS_TOOLS__ALLOW", DEMO_PERMISSIONS)
    # The worker secret of internal events, shared by the children only (never by producers).
    env.setdefault("AGENTBUS_INTERNAL_KEY", secrets.token_hex(32))
    console = settings.console
    if console.token is None and console.read_only_token is None:
        # The console opens to no one without a token: this run's operator token, printed once it serves.
        env["AGENTBUS_CONSOLE__TOKEN"] = secrets.token_urlsafe(24)
    return settings, env, configured


class ConfiguredRedisUnreachable(RuntimeError):
    """The Redis the user configured does not answer: ``up`` never puts a private one in its place."""


def _wait_for_configured_redis(url: str, wait_s: float) -> None:
    """Return once the configured Redis answers; raise :class:`ConfiguredRedisUnreachable` after ``wait_s``."""
    if is_reachable(url):
        return
    shown = redacted_url(url)
    typer.echo(f"waiting up to {wait_s:g}s for the Redis at {shown} (REDIS_URL) to answer")
    deadline = time.monotonic() + wait_s
    while time.monotonic() < deadline:
        time.sleep(REDIS_WAIT_POLL_S)
        if is_reachable(url):
            return
    msg = (
        f"the Redis at {shown} (REDIS_URL) did not answer within {wait_s:g}s; up never replaces a configured "
        "Redis with a private one: start it, fix REDIS_URL, or unset it for a private Redis"
    )
    raise ConfiguredRedisUnreachable(msg)


FAKE_MODEL_KEY: Final = "agentbus-fake-model"
"""The API key the model worker sends to the fake server (it checks only that one is present)."""


def uses_fake_model(settings: Settings, env: dict[str, str]) -> bool:
    """Without an API key, the fake Anthropic-compatible server (``--script demo``) runs as one more
    supervised child for the model worker to call; with one, the model worker calls the real API."""
    if settings.anthropic_api_key is not None and settings.anthropic_api_key.get_secret_value():
        typer.echo(f"model: the Anthropic API ({env.get('AGENTBUS_MODEL__MODEL', settings.model.model)})")
        return False
    env["ANTHROPIC_API_KEY"] = FAKE_MODEL_KEY
    return True


def _start_private_redis(settings: Settings, port: int) -> LocalRedis:
    """A private Redis on 127.0.0.1:``port`` with its append-only file under the data directory (what the
    workers write survives its restarts, and the next ``up``)."""
    directory = Path(settings.data_dir) / "redis"
    return start_local_redis(directory, port=port, appendonly=True, die_with_parent=True)


class UpPlan:
    """What one ``agentbus up`` runs inside its event loop."""

    def __init__(
        self,
        settings: Settings,
        env: dict[str, str],
        tools: int,
        demo: bool,
        exit_after_demo: bool,
        base_port: int,
        policy: RestartPolicy,
        signals: list[signal.Signals],
    ) -> None:
        self.settings = settings
        self.env = env
        self.demo = demo
        self.exit_after_demo = exit_after_demo
        self.base_port = base_port
        self.policy = policy
        self.signals = signals
        names = ["ingestion", "normalization", "transcripts"] + ["tools"] * tools + ["model", "console"]
        self.workers = [(name if name != "tools" else f"tools-{i - 2}", name) for i, name in enumerate(names)]
        self.stop = asyncio.Event()
        self.redis_keeper: PrivateRedisKeeper | None = None
        """The private Redis ``up`` started, supervised while everything runs (None: the user's Redis)."""
        self.fake_model = False
        """Also supervise ``agentbus fake-model --script demo`` (a child process, not a thread: the supervisor
        forks with ``preexec_fn``, which no thread may share the process with)."""
        self.chat_redis_url: str | None = None
        """The Redis URL the next-step line names (:func:`next_step_line`)."""

    async def run(self, logs: WorkerLogs) -> int:
        loop = asyncio.get_running_loop()
        for sig in self.signals:
            loop.add_signal_handler(sig, self.stop.set)
        watches: list[asyncio.Task[None]] = []
        if self.redis_keeper is not None:  # from the start: Redis may die while the workers start
            watches.append(asyncio.create_task(self.redis_keeper.watch(), name="private-redis"))
        supervisor = Supervisor(
            self._children(), on_line=lambda c, line: logs.line(c.label, line), echo=typer.echo, policy=self.policy
        )
        code = 0
        problems: list[str] = []
        try:
            await _init(self.settings)
            await supervisor.start()
            if await self._until_stop(supervisor.wait_ready(), *watches):
                self._announce(supervisor, logs)
                code = await self._serve(supervisor, watches)
        except SupervisionFailed as exc:
            typer.echo(f"agentbus up: {exc}", err=True)
            code = 1
        finally:
            for watch in watches:  # nothing is restarted while everything stops
                watch.cancel()
            await asyncio.gather(*watches, return_exceptions=True)
            problems = await supervisor.stop()
            if code == 0:  # after a failure its reason is the line that matters: the workers' exits follow from it
                for problem in problems:
                    typer.echo(f"agentbus up: {problem}", err=True)
            for sig in self.signals:
                loop.remove_signal_handler(sig)  # which restores the default action: ignore until up is done
                signal.signal(sig, signal.SIG_IGN)
        return 1 if problems else code

    async def _serve(self, supervisor: Supervisor, watches: list[asyncio.Task[None]]) -> int:
        """The demo, then (unless --exit-after-demo) wait for a stop signal, all while the supervisor
        restarts dead workers (and the keeper the private Redis); 1 when the demo failed."""
        watch = asyncio.create_task(supervisor.watch())
        try:
            if self.demo:
                try:
                    if not await self._until_stop(_maybe_demo(self.settings), watch, *watches):
                        return 0
                except SupervisionFailed:
                    raise
                except Exception as exc:
                    typer.echo(f"agentbus up: demo failed: {exc}", err=True)
                    return 1
            if not self.exit_after_demo:
                typer.echo(next_step_line(self.chat_redis_url))
                await self._until_stop(asyncio.Event().wait(), watch, *watches)
            return 0
        finally:
            watch.cancel()

    def _children(self) -> list[Child]:
        children = []
        host = self.settings.http_host
        commands = [(label, ["worker", name]) for label, name in self.workers]
        if self.fake_model:
            commands.append(("fake-model", ["fake-model", "--script", "demo"]))
        for index, (label, arguments) in enumerate(commands):
            wanted = self.base_port + index if self.base_port else 0
            listener, as_wanted = bind_listener_near(host, wanted)
            if not as_wanted:
                actual = listener.getsockname()[1]
                typer.echo(f"port {wanted} on {host} is taken (another `agentbus up`?): {label} serves on {actual}")
            if label == "fake-model":  # every child shares self.env, and none has started yet
                address, port = probe_address(listener)
                url = f"http://[{address}]:{port}" if ":" in address else f"http://{address}:{port}"
                self.env["AGENTBUS_MODEL__BASE_URL"] = url
                typer.echo(f"no ANTHROPIC_API_KEY: the model is the fake server at {url} (demo script)")
            children.append(
                Child(label, [sys.executable, "-m", "agentbus_redis.cli.main", *arguments], self.env, listener)
            )
        return children

    def _announce(self, supervisor: Supervisor, logs: WorkerLogs) -> None:
        for child in supervisor.children:
            host, port = child.listener.getsockname()[:2]
            path = "/" if child.label == "console" else "/metrics"
            typer.echo(f"{child.label:<14} pid {child.pid:<7} http://{host}:{port}{path}")
        generated = self.env.get("AGENTBUS_CONSOLE__TOKEN") if "AGENTBUS_CONSOLE__TOKEN" not in os.environ else None
        if generated:
            typer.echo(f"console token (this run only; set AGENTBUS_CONSOLE__TOKEN to choose one): {generated}")
        typer.echo(f"worker logs: {logs.path}")
        typer.echo("agentbus is up; Ctrl-C stops it")

    async def _until_stop(self, work: Awaitable[object], *watches: asyncio.Task[None]) -> bool:
        """Run ``work``; True once it is done, False when a stop signal came first (``work`` is cancelled).
        A watch that ends first raises its failure (:class:`SupervisionFailed`)."""
        task = asyncio.ensure_future(work)
        stopped = asyncio.create_task(self.stop.wait())
        await asyncio.wait({task, stopped, *watches}, return_when=asyncio.FIRST_COMPLETED)
        stopped.cancel()
        for watch in watches:
            if watch.done():
                task.cancel()
                watch.result()
        if not task.done():
            task.cancel()
            return False
        task.result()
        return True


async def _init(settings: Settings) -> None:
    redis = redis_client.connect(settings.redis_url)
    try:
        await init_streams(redis, Topology(settings.names))
    finally:
        await redis.aclose()


async def _maybe_demo(settings: Settings) -> None:
    async with AgentbusClient.connect(settings.redis_url, names=settings.names) as bus:
        if any([await bus.redis.zcard(index) for index in bus.topology.session_indexes()]):
            typer.echo("existing sessions found: skipping the demo (`agentbus tail SESSION` shows one)")
            return
        session, path, request = await run_demo(bus, settings, echo=typer.echo)
        typer.echo(f"final request of {session}: {len(request.request['messages'])} messages; transcript {path}")
        typer.echo(f"see it again with: agentbus tail {session}")
