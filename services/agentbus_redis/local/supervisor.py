"""Supervise worker processes on one machine (``agentbus up``): each child serves a listening socket the
supervisor bound, dies with the supervisor, is restarted with backoff when it dies, and is given up on
after repeated failures.

- **Bind first.** The supervisor binds every HTTP socket itself and hands it down (:data:`LISTEN_FD_ENV`),
  so ``/readyz`` on that port can only be answered by its own child — never by a leftover process that
  holds the port — and a restarted worker serves the same port.
- **No orphans.** Each child runs in its own session (a Ctrl-C or terminal hang-up reaches only the
  supervisor, which stops the workers before the Redis they write to) and, on Linux, asks the kernel for
  SIGTERM when the supervisor dies (``PR_SET_PDEATHSIG``): a supervisor killed with SIGKILL, which runs
  no clean-up, still takes its children with it.
- Asyncio without threads: child output is read through the event loop and exits are polled
  (``waitpid(WNOHANG)``), so no thread exists when a child is forked (``preexec_fn`` requires that).
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import errno
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Final

LISTEN_FD_ENV: Final = "AGENTBUS_LISTEN_FD"
"""The number of the listening socket a child is handed, served instead of binding one
(``agentbus_redis.workers.registry.run_worker``)."""

PR_SET_PDEATHSIG: Final = 1
"""``prctl`` option (linux/prctl.h): the signal this process gets when its parent thread exits."""

POLL_INTERVAL_S: Final = 0.2
READ_CHUNK: Final = 65_536


class SupervisionFailed(RuntimeError):
    """A child could not be started or kept running: the supervisor stops everything and exits non-zero."""


@dataclass(frozen=True)
class RestartPolicy:
    """When a dead child is started again, and when the supervisor gives up."""

    max_restarts: int = 5
    """Consecutive failed runs restarted; one more and the supervisor gives up."""
    backoff_initial_s: float = 0.5
    backoff_max_s: float = 8.0
    stable_after_s: float = 30.0
    """A run at least this long resets the count of consecutive failures."""

    def delay_s(self, failures: int) -> float:
        """Seconds to wait before the restart that follows ``failures`` consecutive failed runs (≥ 1)."""
        return min(self.backoff_initial_s * 2.0 ** max(failures - 1, 0), self.backoff_max_s)

    def gives_up(self, failures: int) -> bool:
        return failures > self.max_restarts


def die_with_parent(signum: int = signal.SIGTERM) -> Callable[[], None] | None:
    """A ``preexec_fn`` making the child receive ``signum`` when this process dies (Linux), else None.

    The death signal fires when the *thread* that forked the child exits: fork from the main thread.
    If the parent died between fork and ``prctl``, the signal will never come, so the child exits.
    """
    if not sys.platform.startswith("linux"):
        return None
    prctl = ctypes.CDLL(None, use_errno=True).prctl
    parent = os.getpid()

    def set_death_signal() -> None:
        prctl(PR_SET_PDEATHSIG, signum, 0, 0, 0)
        if os.getppid() != parent:
            os._exit(1)

    return set_death_signal


def bind_listener(host: str, port: int, *, inheritable: bool = True, backlog: int = 2048) -> socket.socket:
    """A listening TCP socket on ``host:port`` (0: a free port), inheritable by children unless told; a taken
    port fails here, naming it.

    The socket names ``IPPROTO_TCP`` rather than protocol 0: asyncio sets ``TCP_NODELAY`` only on connections
    accepted from a socket whose ``proto`` says TCP. Without it Nagle holds every small write after the first
    (an SSE event, a proxied reply) until the peer's delayed ACK, 40 ms on Linux: the whole 130-event reply of
    ``bench/model_worker.py`` reached the model worker 40 ms after its headers.
    """
    family = socket.getaddrinfo(host, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE)[0][0]
    listener = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    try:
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        if family == socket.AF_INET6:
            listener.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
        listener.bind((host, port))
    except OSError as error:
        listener.close()
        raise OSError(error.errno, f"cannot listen on {host}:{port}: {error.strerror}") from error
    listener.listen(backlog)  # connections made before the app is up wait instead of being refused
    listener.set_inheritable(inheritable)
    return listener


def bind_listener_near(host: str, port: int) -> tuple[socket.socket, bool]:
    """``bind_listener(host, port)``, or on a free port when ``port`` is taken; the flag says which."""
    try:
        return bind_listener(host, port), True
    except OSError as exc:
        if exc.errno != errno.EADDRINUSE or port == 0:
            raise
        return bind_listener(host, 0), False


def probe_address(listener: socket.socket) -> tuple[str, int]:
    """Where to connect to reach ``listener`` from this machine (a wildcard address becomes loopback)."""
    host, port = listener.getsockname()[:2]
    loopback = {"0.0.0.0": "127.0.0.1", "::": "::1"}
    return loopback.get(host, host), port


async def http_ok(host: str, port: int, path: str, *, timeout_s: float = 1.0) -> bool:
    """Whether ``GET path`` answers 2xx (no thread: ``urllib`` would block the loop)."""
    try:
        async with asyncio.timeout(timeout_s):
            reader, writer = await asyncio.open_connection(host, port)
            try:
                writer.write(f"GET {path} HTTP/1.0\r\nHost: {host}\r\n\r\n".encode())
                status = (await reader.readline()).split()
            finally:
                writer.close()
                with contextlib.suppress(OSError):
                    await writer.wait_closed()
    except (OSError, TimeoutError):
        return False
    return len(status) >= 2 and status[1].startswith(b"2")


@dataclass
class Child:
    """One supervised process: how to start it, the socket it serves and its current run."""

    label: str
    command: list[str]
    env: dict[str, str]
    listener: socket.socket
    process: subprocess.Popen[bytes] | None = None
    started_at: float = 0.0
    ready: bool = False
    failures: int = 0
    """Consecutive runs that ended on their own before :attr:`RestartPolicy.stable_after_s`."""
    restart_at: float | None = None
    pump: asyncio.Task[None] | None = field(default=None, repr=False)

    @property
    def pid(self) -> int:
        return self.process.pid if self.process is not None else 0

    @property
    def address(self) -> tuple[str, int]:
        return probe_address(self.listener)

    def alive(self) -> bool:
        return self.process is not None and self.process.poll() is None


LineSink = Callable[[Child, bytes], None]
"""Receives every line a child prints (stdout and stderr), without its newline."""


class Supervisor:
    """Starts children, waits for their ``/readyz``, restarts the ones that die, stops them all."""

    def __init__(
        self,
        children: list[Child],
        *,
        on_line: LineSink,
        echo: Callable[[str], None],
        policy: RestartPolicy | None = None,
        ready_path: str = "/readyz",
    ) -> None:
        self.children = children
        self.on_line = on_line
        self.echo = echo
        self.policy = policy or RestartPolicy()
        self.ready_path = ready_path
        self.stopping = False
        self._death_signal = die_with_parent()

    async def start(self) -> None:
        for child in self.children:
            await self._spawn(child)

    async def wait_ready(self, timeout_s: float = 60.0) -> None:
        """Until every child answers ``/readyz``; a child that exits first fails the start-up."""
        deadline = time.monotonic() + timeout_s
        while waiting := [child for child in self.children if not child.ready]:
            for child in waiting:
                if not child.alive():
                    assert child.process is not None
                    msg = f"worker {child.label} exited with code {child.process.returncode} before it was ready"
                    raise SupervisionFailed(msg)
            # Together: a probe of a worker not serving yet waits in the socket's backlog until it times out.
            answers = await asyncio.gather(*(http_ok(*child.address, self.ready_path) for child in waiting))
            for child, ready in zip(waiting, answers, strict=True):
                child.ready = ready
            if time.monotonic() > deadline:
                late = ", ".join(child.label for child in self.children if not child.ready)
                msg = f"worker(s) {late} not ready after {timeout_s:g}s"
                raise SupervisionFailed(msg)
            await asyncio.sleep(POLL_INTERVAL_S)

    async def watch(self) -> None:
        """Restart children that die (with backoff) until stopped; raises when one keeps dying."""
        while not self.stopping:
            now = time.monotonic()
            for child in self.children:
                await self._check(child, now)
            await asyncio.sleep(POLL_INTERVAL_S)

    async def _check(self, child: Child, now: float) -> None:
        if child.restart_at is not None:
            if now >= child.restart_at:
                await self._spawn(child)
                self.echo(f"worker {child.label} restarted: pid {child.pid}")
            return
        if child.alive():
            if not child.ready and await http_ok(*child.address, self.ready_path, timeout_s=0.5):
                child.ready = True
                self.echo(f"worker {child.label} (pid {child.pid}) is ready again")
            if now - child.started_at >= self.policy.stable_after_s:
                child.failures = 0
            return
        assert child.process is not None
        child.failures += 1
        code = child.process.returncode
        if self.policy.gives_up(child.failures):
            msg = f"worker {child.label} died {child.failures} times in a row (last exit code {code}): giving up"
            raise SupervisionFailed(msg)
        delay = self.policy.delay_s(child.failures)
        self.echo(
            f"worker {child.label} (pid {child.pid}) exited with code {code}; restarting in {delay:g}s "
            f"(failure {child.failures} of at most {self.policy.max_restarts})"
        )
        child.ready = False
        child.restart_at = now + delay

    async def stop(self, grace_s: float = 30.0) -> list[str]:
        """SIGTERM every child (graceful: each finishes and acks its batch), SIGKILL its process group
        after ``grace_s``; returns what went wrong (non-zero exits, kills)."""
        self.stopping = True
        running = [child for child in self.children if child.alive()]
        for child in running:
            assert child.process is not None
            child.process.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + grace_s
        while any(child.alive() for child in running) and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
        problems: list[str] = []
        for child in running:
            assert child.process is not None
            if child.alive():
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(child.process.pid, signal.SIGKILL)
                child.process.wait()
                problems.append(f"worker {child.label} (pid {child.pid}) did not stop within {grace_s:g}s: killed")
            elif child.process.returncode not in (0, -signal.SIGTERM):  # uvicorn re-raises the signal it handled
                problems.append(f"worker {child.label} (pid {child.pid}) stopped with code {child.process.returncode}")
        pumps = [child.pump for child in self.children if child.pump is not None]
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(asyncio.gather(*pumps, return_exceptions=True), timeout=5)
        return problems

    async def _spawn(self, child: Child) -> None:
        env = {**child.env, LISTEN_FD_ENV: str(child.listener.fileno())}
        child.process = subprocess.Popen(
            child.command,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            bufsize=0,
            pass_fds=(child.listener.fileno(),),
            start_new_session=True,
            preexec_fn=self._death_signal,  # no thread runs in this process (module doc)
        )
        child.started_at = time.monotonic()
        child.ready = False
        child.restart_at = None
        child.pump = asyncio.create_task(self._pump(child, child.process))

    async def _pump(self, child: Child, process: subprocess.Popen[bytes]) -> None:
        """Hand every line ``process`` prints to ``on_line`` until it closes its output."""
        assert process.stdout is not None
        loop = asyncio.get_running_loop()
        reader = asyncio.StreamReader(limit=READ_CHUNK)
        transport, _ = await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), process.stdout)
        pending = b""
        try:
            while chunk := await reader.read(READ_CHUNK):
                *lines, pending = (pending + chunk).split(b"\n")
                for line in lines:
                    self.on_line(child, line)
            if pending:
                self.on_line(child, pending)
        finally:
            transport.close()
