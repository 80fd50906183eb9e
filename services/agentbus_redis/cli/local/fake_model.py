"""``agentbus fake-model``: the fake Anthropic-compatible model server as a process (tests, the demo).

It prints its URL on stderr once it accepts requests (``--port 0`` picks a free port; under ``agentbus up``
it serves the socket the supervisor hands down and answers ``/readyz``) and stops on SIGINT or SIGTERM,
cutting any request still in flight. The protocol and the scripting endpoints are in
``workers/model/fake_app.py``.
"""

from __future__ import annotations

import os
from typing import Annotated

import structlog
import typer

from agentbus_redis.cli.common import fail
from agentbus_redis.config.settings import Settings
from agentbus_redis.local.supervisor import LISTEN_FD_ENV
from agentbus_redis.observability.logging import configure_logging
from agentbus_redis.workers.model.fake_scripts import FallbackScript
from agentbus_redis.workers.model.fake_server import listener_for_process, serve_until_signalled
from agentbus_redis.workers.model.fake_state import DEFAULT_KEEP_REQUESTS, FakeModelState


def fake_model_command(
    host: Annotated[str, typer.Option("--host", help="Address to listen on.")] = "127.0.0.1",
    port: Annotated[int, typer.Option("--port", min=0, max=65535, help="Port; 0 picks a free one.")] = 0,
    script: Annotated[
        FallbackScript,
        typer.Option(
            "--script",
            help='Answer of a request nothing was scripted for: echo ("You said: …") or demo (the demo\'s tour).',
        ),
    ] = "echo",
    keep_requests: Annotated[
        int, typer.Option("--keep-requests", min=1, help="How many of the latest requests /_fake/requests keeps.")
    ] = DEFAULT_KEEP_REQUESTS,
) -> None:
    """Serve the Messages API from scripted replies and faults; prints its URL on stderr."""

    supervised = LISTEN_FD_ENV in os.environ
    if supervised:  # under `agentbus up`: JSON lines like every worker's, into up's log
        configure_logging(Settings().log_level, static={"worker": "fake-model"})

    def announce(url: str) -> None:
        if supervised:
            structlog.get_logger(__name__).info("fake_model_listening", url=url)
        else:
            typer.echo(url, err=True)

    try:
        listener = listener_for_process(host, port)
    except OSError as error:
        fail(f"cannot listen on {host}:{port}: {error.strerror or error}")
    serve_until_signalled(listener, FakeModelState(script, keep_requests), on_listening=announce)
