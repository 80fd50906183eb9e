"""Every server of ours accepts connections with ``TCP_NODELAY`` set (``local.supervisor.bind_listener``), on the
stdlib loop as on uvloop: without it Nagle held each streamed SSE event behind the client's delayed ACK, and
the fake model's whole reply reached the model worker 40 ms after its headers (issue 31: the +42 ms of added
time to first token in ``bench/model_worker.py`` was this, not the bus)."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Callable, Coroutine
from typing import Any

import pytest
import uvloop

from agentbus_redis.local.supervisor import bind_listener
from agentbus_redis.workers.registry import bind_http_port

Runner = Callable[[Coroutine[Any, Any, int]], int]


async def accepted_nodelay(listener: socket.socket) -> int:
    """TCP_NODELAY of the server's side of one connection to ``listener``."""
    seen: asyncio.Future[int] = asyncio.get_running_loop().create_future()

    def accept(_: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        seen.set_result(writer.get_extra_info("socket").getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY))
        writer.close()

    server = await asyncio.start_server(accept, sock=listener)
    async with server:
        host, port = listener.getsockname()[:2]
        _, writer = await asyncio.open_connection(host, port)
        value = await seen
        writer.close()
    return value


@pytest.mark.parametrize("run", [asyncio.run, uvloop.run], ids=["asyncio", "uvloop"])
@pytest.mark.parametrize("bind", [bind_listener, bind_http_port], ids=["bind_listener", "bind_http_port"])
def test_connections_a_listener_accepts_send_without_delay(
    run: Runner, bind: Callable[[str, int], socket.socket]
) -> None:
    with bind("127.0.0.1", 0) as listener:
        assert run(accepted_nodelay(listener)) != 0


def test_a_socket_of_protocol_zero_would_not_be_set_on_the_stdlib_loop() -> None:
    """Why bind_listener names IPPROTO_TCP: the stdlib loop checks ``sock.proto`` before it sets the option."""
    with socket.create_server(("127.0.0.1", 0)) as listener:
        assert asyncio.run(accepted_nodelay(listener)) == 0
