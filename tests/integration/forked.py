"""Worker processes forked from a server that has already imported agentbus (``multiprocessing``'s forkserver).

The suite starts a few hundred worker processes; a fresh ``python -m agentbus_redis.cli.main worker NAME`` spends
about a second of CPU importing before it does anything (redis-py, pydantic models, FastStream, uvicorn), and on
a 2-core machine that was the largest single cost of the suite. A process forked from a server that imported
those modules once is ready after ~0.2 s of CPU.

What the tests get is still a worker process of its own — its pid, its signals (SIGKILL, SIGSTOP), its exit
status — running the real command line (``agentbus_redis.cli.main.main`` with ``worker NAME ARGS``) with the
environment it is given and nothing else: the forked child replaces its whole environment before the command
reads any setting. The forkserver is single-threaded and runs no event loop (the pytest process that asks for
a worker has both, which is why the worker is not forked from it). :class:`ForkedProcess` offers the part of
``subprocess.Popen`` the tests use.

What differs from a new interpreter, and where it matters: the kernel's view of the process
(``/proc/PID/environ`` and ``cmdline``) is the forkserver's, not the worker's. A test about what the process
itself exposes runs its workers as new interpreters (``WorkerCluster(forked=False)``); so do the tests about the
command line itself (start-up time, what a command imports, its exit codes: ``tests/cli/process.py``).
"""

from __future__ import annotations

import atexit
import contextlib
import ctypes
import importlib
import multiprocessing
import multiprocessing.util  # registers its exit handler now, so that ours (registered later) runs first
import os
import signal
import socket
import subprocess
import sys
from collections.abc import Mapping, Sequence
from multiprocessing.context import ForkServerContext
from multiprocessing.process import BaseProcess
from pathlib import Path

from agentbus_redis.local.supervisor import LISTEN_FD_ENV, PR_SET_PDEATHSIG

PRELOADED_MODULES = [
    "agentbus_redis.cli.main",
    "agentbus_redis.cli.bus",
    "agentbus_redis.workers.registry",
    "agentbus_redis.workers.ingestion.app",
    "agentbus_redis.workers.normalization.app",
    "agentbus_redis.workers.transcripts.app",
    "agentbus_redis.workers.tools.app",
    "agentbus_redis.workers.model.app",
    "agentbus_redis.cli.local.fake_model",
    # What a worker imports only when it starts serving (uvicorn picks its loop and protocols then): about a
    # tenth of a forked worker's start-up CPU when each child imported them again.
    "uvloop",
    "uvicorn.protocols.http.auto",
    "uvicorn.protocols.websockets.auto",
    "uvicorn.lifespan.on",
    "anyio._backends._asyncio",
    "msgpack",
    "tests.integration.forkserver_heap",  # last: freezes what the imports above built
]
"""Imported once by the forkserver: every worker type's module and the command line that starts it, then its
heap frozen (:mod:`tests.integration.forkserver_heap`)."""

_context: ForkServerContext | None = None


def forkserver() -> ForkServerContext:
    global _context
    if _context is None:
        _context = multiprocessing.get_context("forkserver")
        _context.set_forkserver_preload(PRELOADED_MODULES)
    return _context


class ForkedProcess:
    """The part of :class:`subprocess.Popen` the tests use, over a process forked by the forkserver."""

    def __init__(self, process: BaseProcess, args: list[str]) -> None:
        self._process = process
        self.args = args

    @property
    def pid(self) -> int:
        pid = self._process.pid
        assert pid is not None
        return pid

    @property
    def returncode(self) -> int | None:
        return self._process.exitcode

    def poll(self) -> int | None:
        self._process.is_alive()  # reads the exit status when there is one
        return self._process.exitcode

    def wait(self, timeout: float | None = None) -> int:
        self._process.join(timeout)
        if self._process.exitcode is None:
            raise subprocess.TimeoutExpired(self.args, timeout or 0)
        return self._process.exitcode

    def send_signal(self, signum: int) -> None:
        if self.poll() is None:  # never signal a pid that may have been reused
            os.kill(self.pid, signum)

    def terminate(self) -> None:
        self.send_signal(signal.SIGTERM)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)


def start_command(
    argv: Sequence[str], *, env: Mapping[str, str], log_path: Path, listener: socket.socket | None = None
) -> ForkedProcess:
    """``agentbus ARGV`` in a forked process with exactly ``env``, its output in ``log_path``; ``listener`` is
    handed down as the worker's HTTP socket (as ``agentbus up`` hands it)."""
    log_path.write_bytes(b"")  # there from the start, as a redirected Popen's output file is
    process = forkserver().Process(
        target=_run_command, args=(list(argv), dict(env), str(log_path), listener), daemon=True
    )
    process.start()
    _started.append(process)
    return ForkedProcess(process, [sys.executable, "-m", "agentbus_redis.cli.main", *argv])


def start_interpreter(
    argv: Sequence[str], *, env: Mapping[str, str], log_path: Path, listener: socket.socket | None = None
) -> subprocess.Popen[bytes]:
    """``agentbus ARGV`` as a new interpreter (``python -m agentbus_redis.cli.main``), the same hand-down."""
    handed = {} if listener is None else {LISTEN_FD_ENV: str(listener.fileno())}
    with log_path.open("wb") as log:
        return subprocess.Popen(
            [sys.executable, "-m", "agentbus_redis.cli.main", *argv],
            env={**env, **handed},
            stdout=log,
            stderr=subprocess.STDOUT,
            pass_fds=() if listener is None else (listener.fileno(),),
        )


WorkerProcess = ForkedProcess | subprocess.Popen[bytes]
"""A worker of a test deployment: forked (the default) or a new interpreter."""

_started: list[BaseProcess] = []


@atexit.register
def _kill_leftovers() -> None:
    """At the test process's exit, SIGKILL what a test left running (multiprocessing's own exit handler, which
    runs after this one, would SIGTERM them and wait for each without a bound)."""
    for process in _started:
        if process.exitcode is None and process.is_alive():
            with contextlib.suppress(OSError):
                os.kill(process.pid, signal.SIGKILL)  # type: ignore[arg-type]
            process.join()


def _run_command(argv: list[str], env: dict[str, str], log_path: str, listener: socket.socket | None) -> None:
    """In the forked child: become ``agentbus ARGV`` as a new process would."""
    with contextlib.suppress(OSError, AttributeError):  # end with the forkserver (it ends with the test process)
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGTERM)
    log = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    os.dup2(log, 1)
    os.dup2(log, 2)
    os.close(log)
    stdin = os.open(os.devnull, os.O_RDONLY)
    os.dup2(stdin, 0)
    os.close(stdin)
    os.environ.clear()
    os.environ.update(env)
    # What a new interpreter reads from its environment at start-up, before any import: PYTHONPATH.
    added = [entry for entry in env.get("PYTHONPATH", "").split(os.pathsep) if entry and entry not in sys.path]
    sys.path[1:1] = added
    importlib.invalidate_caches()  # packages installed after the forkserver started (a test's --target install)
    if listener is not None:
        os.environ[LISTEN_FD_ENV] = str(listener.fileno())
    sys.argv = ["agentbus", *argv]
    from agentbus_redis.cli.main import main

    try:
        main()
    finally:
        atexit._run_exitfuncs()  # a new interpreter would run them; multiprocessing's child ends with os._exit
