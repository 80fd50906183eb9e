"""``agentbus worker console``: serve the console with uvicorn on the port ``agentbus up`` handed down (or
``--port``, or a free one, printed)."""

from __future__ import annotations

import os
import socket
import sys

import uvicorn

from agentbus_redis.config.settings import Settings
from agentbus_redis.console.app import build_console
from agentbus_redis.local.supervisor import LISTEN_FD_ENV, bind_listener
from agentbus_redis.observability.logging import configure_logging


class NoConsoleToken(RuntimeError):
    def __init__(self) -> None:
        super().__init__(
            "AGENTBUS_CONSOLE__TOKEN (or AGENTBUS_CONSOLE__READ_ONLY_TOKEN) is not set: the console opens to no one "
            "without a token (`agentbus up` generates one and prints it)"
        )


def run_console(settings: Settings | None = None, *, port: int | None = None) -> None:
    """Serve the console until SIGTERM/SIGINT."""
    resolved = settings if settings is not None else Settings()
    console = resolved.console
    if not any(t is not None and t.get_secret_value() for t in (console.token, console.read_only_token)):
        raise NoConsoleToken
    configure_logging(resolved.log_level, static={"worker": "console"})
    fd = os.environ.pop(LISTEN_FD_ENV, None)  # the socket `agentbus up` bound for this child (it prints where)
    listener = (
        socket.socket(fileno=int(fd))
        if fd is not None
        else bind_listener(resolved.http_host, resolved.http_port if port is None else port)
    )
    host, bound = listener.getsockname()[:2]
    if fd is None:
        sys.stderr.write(f"agentbus: console on http://{host}:{bound}/\n")
    config = uvicorn.Config(
        build_console(resolved),
        host=resolved.http_host,
        port=bound,
        log_level=resolved.log_level.lower(),
        access_log=False,
        log_config=None,
        lifespan="on",
    )
    uvicorn.Server(config).run(sockets=[listener])
