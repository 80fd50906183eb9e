"""``agentbus up``: every worker as its own process, a private Redis when none is reachable, and the
demo session on an empty system."""

from __future__ import annotations

import asyncio
import os
import secrets
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Annotated
from urllib.parse import urlparse

import typer
from redis.asyncio import Redis

from services.client import AgentbusClient
from services.demo import run_demo
from services.runtime.local_redis import LocalRedis, free_port, is_reachable, start_local_redis
from services.runtime.settings import Settings
from services.runtime.stream_admin import init_streams
from services.runtime.topology import Topology

DEMO_PERMISSIONS = '["Read", "Glob", "Grep", "Write", "Bash(ls:*)"]'
"""What `up` lets its tool workers do unless AGENTBUS_TOOLS__ALLOW says otherwise (Bash only `ls …`)."""


def up_command(
    tools: Annotated[int, typer.Option("--tools", help="Number of tool-execution workers.")] = 2,
    demo: Annotated[bool, typer.Option("--demo/--no-demo", help="Run the demo session on an empty system.")] = True,
    exit_after_demo: Annotated[
        bool, typer.Option("--exit-after-demo", help="Stop everything once the demo is done (for CI and smoke tests).")
    ] = False,
    base_port: Annotated[
        int, typer.Option("--base-port", help="First HTTP port (/metrics, /healthz, /readyz).")
    ] = 9400,
) -> None:
    """Start the four worker types (tools scaled to --tools) and, if needed, a private Redis."""
    settings = Settings()
    redis_server: LocalRedis | None = None
    env = dict(os.environ)
    if not is_reachable(settings.redis_url):
        redis_server = _start_private_redis(settings)
        env["REDIS_URL"] = redis_server.url
        settings = Settings(redis_url=redis_server.url)
        typer.echo(f"no Redis reachable: started a private one at {redis_server.url} (AOF in {redis_server.directory})")
    env.setdefault("AGENTBUS_TOOLS__ALLOW", DEMO_PERMISSIONS)
    # The worker secret of internal events, shared by the children only (never by producers).
    env.setdefault("AGENTBUS_INTERNAL_KEY", secrets.token_hex(32))
    asyncio.run(_init(settings))
    layout = [("ingestion", 1), ("normalization", 1), ("transcripts", 1), ("tools", tools)]
    children: list[tuple[str, subprocess.Popen[bytes], int]] = []
    port = base_port
    try:
        for name, count in layout:
            for _ in range(count):
                command = [sys.executable, "-m", "services.cli.main", "worker", name, "--port", str(port)]
                # Own session: Ctrl-C reaches only this process, which stops the workers (gracefully,
                # SIGTERM) before the private Redis they are still writing to.
                children.append((name, subprocess.Popen(command, env=env, start_new_session=True), port))
                port += 1
        _wait_ready(children)
        for name, child, child_port in children:
            typer.echo(f"{name:<14} pid {child.pid:<7} http://127.0.0.1:{child_port}/metrics")
        if demo:
            asyncio.run(_maybe_demo(settings))
        if exit_after_demo:
            return
        _wait_for_signal(children)
    finally:
        _stop(children)
        if redis_server is not None:
            redis_server.stop()


def _start_private_redis(settings: Settings) -> LocalRedis:
    parsed = urlparse(settings.redis_url)
    local = parsed.hostname in {"127.0.0.1", "localhost", "::1"}
    port = parsed.port or 6379
    directory = Path(settings.data_dir) / "redis"
    return start_local_redis(directory, port=port if local else free_port(), appendonly=True)


async def _init(settings: Settings) -> None:
    redis = Redis.from_url(settings.redis_url)
    try:
        await init_streams(redis, Topology(settings.names))
    finally:
        await redis.aclose()


async def _maybe_demo(settings: Settings) -> None:
    async with AgentbusClient.connect(settings.redis_url, names=settings.names) as bus:
        if await bus.redis.zcard(bus.topology.sessions()) > 0:
            typer.echo("existing sessions found: skipping the demo (`agentbus tail SESSION` shows one)")
            return
        session, path, request = await run_demo(bus, settings, echo=typer.echo)
        typer.echo(f"final request of {session}: {len(request.request['messages'])} messages; transcript {path}")
        typer.echo(f"see it again with: agentbus tail {session}")


def _wait_ready(children: list[tuple[str, subprocess.Popen[bytes], int]], timeout_s: float = 60.0) -> None:
    deadline = time.monotonic() + timeout_s
    for name, child, port in children:
        while True:
            if child.poll() is not None:
                raise typer.Exit(f"worker {name} exited with {child.returncode}")  # type: ignore[arg-type]
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/readyz", timeout=1) as response:
                    if response.status == 200:
                        break
            except (urllib.error.URLError, OSError):
                pass
            if time.monotonic() > deadline:
                raise typer.Exit(f"worker {name} not ready after {timeout_s}s")  # type: ignore[arg-type]
            time.sleep(0.1)


def _wait_for_signal(children: list[tuple[str, subprocess.Popen[bytes], int]]) -> None:
    stop = False

    def request_stop(signum: int, frame: object) -> None:
        nonlocal stop
        stop = True

    signal.signal(signal.SIGTERM, request_stop)
    signal.signal(signal.SIGINT, request_stop)
    typer.echo("agentbus is up; Ctrl-C stops it")  # only now: a Ctrl-C from here on is a graceful stop
    while not stop:
        for name, child, _ in children:
            if child.poll() is not None:
                typer.echo(f"worker {name} (pid {child.pid}) exited with {child.returncode}", err=True)
                return
        time.sleep(0.5)


def _stop(children: list[tuple[str, subprocess.Popen[bytes], int]]) -> None:
    """SIGTERM every worker (graceful: each finishes and acks its batch), then wait."""
    for _, child, _ in children:
        if child.poll() is None:
            child.send_signal(signal.SIGTERM)
    for _, child, _ in children:
        try:
            child.wait(timeout=30)
        except subprocess.TimeoutExpired:
            child.kill()
