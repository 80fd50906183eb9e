"""The fake Anthropic-compatible model server, run for tests and the demo (CONTRACTS.md "The fake
Anthropic-compatible server"; the protocol itself is in :mod:`agentbus_redis.workers.model.fake_app`).

- In tests: ``async with FakeModelServer.start(port=0, script="echo") as fake:`` (or the sync
  :meth:`FakeModelServer.running`) serves on loopback from uvicorn in a background thread with its own
  event loop, so a busy test loop never slows the model down; ``fake.base_url`` goes to
  ``AsyncAnthropic(base_url=…)``; ``await fake.script(session_id, steps)``, ``await fake.requests()``,
  ``await fake.reset()`` talk HTTP to the admin endpoints, as :class:`FakeModelAdmin` does for a server
  running in another process.
- As a process: ``agentbus fake-model`` (:func:`serve_until_signalled`).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import socket
import threading
import urllib.parse
import urllib.request
from collections.abc import AsyncIterator, Callable, Iterator, Mapping, Sequence
from functools import partial
from typing import Final

import orjson
import uvicorn
from pydantic import BaseModel

from agentbus_redis.local.supervisor import LISTEN_FD_ENV, bind_listener
from agentbus_redis.workers.model.fake_app import fake_model_app
from agentbus_redis.workers.model.fake_scripts import FallbackScript
from agentbus_redis.workers.model.fake_state import DEFAULT_KEEP_REQUESTS, FakeModelState
from agentbus_redis.workers.model.fake_steps import STEP_ADAPTER, HangStep, HttpErrorStep, RecordedRequest, ReplyStep

START_TIMEOUT_S: Final = 10.0
SETTLE_TIMEOUT_S: Final = 10.0
ADMIN_TIMEOUT_S: Final = SETTLE_TIMEOUT_S + 10.0

StepLike = ReplyStep | HttpErrorStep | HangStep | Mapping[str, object]


class _Uvicorn(uvicorn.Server):
    """uvicorn that reports when it listens, leaves signals to its owner, and on stop first ends the
    fake's pending waits (hangs, slow streams) so shutdown does not wait for them."""

    def __init__(
        self, config: uvicorn.Config, state: FakeModelState, on_ready: Callable[[], None] | None = None
    ) -> None:
        super().__init__(config)
        self.state = state
        self.ready = threading.Event()
        self.on_ready = on_ready
        self.loop: asyncio.AbstractEventLoop | None = None

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        await super().startup(sockets)
        self.loop = asyncio.get_running_loop()
        self.ready.set()
        if self.on_ready is not None:
            self.on_ready()

    @contextlib.contextmanager
    def capture_signals(self) -> Iterator[None]:
        yield

    def request_stop(self) -> None:
        """Stop serving; safe from any thread (and from a signal handler)."""
        if self.loop is not None and not self.loop.is_closed():
            with contextlib.suppress(RuntimeError):  # the loop closed meanwhile
                self.loop.call_soon_threadsafe(self.state.stopping.set)
        self.should_exit = True


def _listening_socket(host: str, port: int) -> socket.socket:
    return bind_listener(host, port, inheritable=False)


def _url(sock: socket.socket) -> str:
    host, port = sock.getsockname()[:2]
    return f"http://[{host}]:{port}" if sock.family == socket.AF_INET6 else f"http://{host}:{port}"


def listener_for_process(host: str, port: int) -> socket.socket:
    """The socket ``agentbus up``'s supervisor bound and handed down (:data:`LISTEN_FD_ENV`, so its
    ``/readyz`` check reaches this process and a restart serves the same port), else a new one on
    ``host:port``. The variable is removed so nothing this process starts inherits it."""
    fd = os.environ.pop(LISTEN_FD_ENV, None)
    return socket.socket(fileno=int(fd)) if fd is not None else _listening_socket(host, port)


def _uvicorn(state: FakeModelState, on_ready: Callable[[], None] | None = None) -> _Uvicorn:
    config = uvicorn.Config(
        fake_model_app(state),
        http="h11",  # the drop fault closes h11's transport (fake_app._transport_closer)
        lifespan="off",
        access_log=False,
        log_config=None,  # leave the host process's logging alone
        timeout_graceful_shutdown=2,
    )
    return _Uvicorn(config, state, on_ready)


class FakeModelAdmin:
    """HTTP client of a fake model server's ``/_fake/*`` endpoints (blocking; stdlib only)."""

    def __init__(self, base_url: str) -> None:
        self.base_url = base_url.rstrip("/")
        self._opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))  # loopback: no proxy

    def _call(self, method: str, path: str, body: object = None) -> object:
        data = None if body is None else orjson.dumps(body)
        request = urllib.request.Request(self.base_url + path, data=data, method=method)
        request.add_header("content-type", "application/json")
        with self._opener.open(request, timeout=ADMIN_TIMEOUT_S) as response:
            return orjson.loads(response.read())

    def script(self, session_id: str | None, steps: Sequence[StepLike]) -> int:
        """Append ``steps`` to ``session_id``'s queue (None = the default queue); returns its length."""
        dumped = [
            s.model_dump(mode="json")
            if isinstance(s, BaseModel)
            else STEP_ADAPTER.validate_python(s).model_dump(mode="json")
            for s in steps
        ]
        answer = self._call("POST", "/_fake/script", {"session_id": session_id, "steps": dumped})
        assert isinstance(answer, dict)
        return int(answer["queued"])

    def requests(self, session_id: str | None = None, *, settled: bool = False) -> list[RecordedRequest]:
        """Every request received (of ``session_id`` when given), in order. ``settled``: once none of
        them is still being answered (each has its ``ended``), waiting up to :data:`SETTLE_TIMEOUT_S`."""
        query: dict[str, str | float] = {} if session_id is None else {"session_id": session_id}
        if settled:
            query["settled_within_s"] = SETTLE_TIMEOUT_S
        answer = self._call("GET", "/_fake/requests" + (f"?{urllib.parse.urlencode(query)}" if query else ""))
        assert isinstance(answer, list)
        return [RecordedRequest.model_validate(item) for item in answer]

    def reset(self) -> None:
        """Forget every queued step and recorded request."""
        self._call("POST", "/_fake/reset", {})


class FakeModelServer:
    """A running fake model server (see the module docstring)."""

    def __init__(self, base_url: str, script: FallbackScript) -> None:
        self.base_url = base_url
        self.fallback_script = script
        self.admin = FakeModelAdmin(base_url)

    @classmethod
    @contextlib.contextmanager
    def running(
        cls,
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        script: FallbackScript = "echo",
        keep_requests: int = DEFAULT_KEEP_REQUESTS,
    ) -> Iterator[FakeModelServer]:
        """Serve from a background thread while the block runs (blocking start and stop)."""
        sock = _listening_socket(host, port)
        server = _uvicorn(FakeModelState(script=script, keep_requests=keep_requests))
        thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, name="fake-model", daemon=True)
        try:
            thread.start()
            if not server.ready.wait(START_TIMEOUT_S):
                raise RuntimeError(f"the fake model server did not start within {START_TIMEOUT_S} s")
            yield cls(_url(sock), script)
        finally:
            server.request_stop()
            thread.join(START_TIMEOUT_S)
            sock.close()

    @classmethod
    @contextlib.asynccontextmanager
    async def start(
        cls,
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        script: FallbackScript = "echo",
        keep_requests: int = DEFAULT_KEEP_REQUESTS,
    ) -> AsyncIterator[FakeModelServer]:
        """:meth:`running` for async code: start and stop happen off the caller's event loop."""
        manager = cls.running(host=host, port=port, script=script, keep_requests=keep_requests)
        fake = await asyncio.to_thread(manager.__enter__)
        try:
            yield fake
        finally:
            await asyncio.to_thread(manager.__exit__, None, None, None)

    async def script(self, session_id: str | None, steps: Sequence[StepLike]) -> int:
        return await asyncio.to_thread(self.admin.script, session_id, steps)

    async def requests(self, session_id: str | None = None, *, settled: bool = False) -> list[RecordedRequest]:
        return await asyncio.to_thread(partial(self.admin.requests, session_id, settled=settled))

    async def reset(self) -> None:
        await asyncio.to_thread(self.admin.reset)


def serve_until_signalled(
    listener: socket.socket, state: FakeModelState, *, on_listening: Callable[[str], None]
) -> None:
    """Serve on ``listener`` in this thread until SIGINT or SIGTERM; ``on_listening(url)`` once it
    accepts requests."""
    url = _url(listener)
    server = _uvicorn(state, on_ready=lambda: on_listening(url))

    async def main() -> None:
        loop = asyncio.get_running_loop()
        for signum in (signal.SIGINT, signal.SIGTERM):
            loop.add_signal_handler(signum, server.request_stop)
        await server.serve(sockets=[listener])

    try:
        asyncio.run(main())
    finally:
        listener.close()


__all__ = ["FakeModelAdmin", "FakeModelServer", "listener_for_process", "serve_until_signalled"]
