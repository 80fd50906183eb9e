"""Start a private ``redis-server`` when none is reachable.

Used by ``agentbus up`` (so a newcomer needs nothing but the Debian ``redis-server`` package) and by the
test suite (every test session gets its own server on a free port, so tests never touch a developer's
data and clean up by killing the process).
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final

import redis
import redis.asyncio as aioredis

from agentbus_redis.local.supervisor import RestartPolicy, SupervisionFailed, die_with_parent
from agentbus_redis.runtime.redis_client import cluster_node_url, is_cluster_url


class RedisServerUnavailable(RuntimeError):
    """No Redis is reachable and none could be started."""


def is_reachable(url: str, *, timeout_s: float = 0.5) -> bool:
    """Return True when a Redis server answers PING at ``url`` (a cluster URL: its first node)."""
    if is_cluster_url(url):
        url = cluster_node_url(url)[0]
    client = redis.Redis.from_url(url, socket_connect_timeout=timeout_s, socket_timeout=timeout_s)
    try:
        return bool(client.ping())
    except (redis.ConnectionError, redis.TimeoutError, OSError):
        return False
    finally:
        client.close()


LOWEST_LISTEN_PORT: Final = 10_000
"""Where :func:`free_port` starts looking (below it live the well-known and registered services)."""

FREE_PORT_TRIES: Final = 200


def ephemeral_port_floor() -> int:
    """The first port of the kernel's ephemeral range (``ip_local_port_range``; Linux's default 32768)."""
    try:
        return int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32_768


def free_port(*, headroom: int = 0) -> int:
    """A TCP port on the loopback interface that nothing listens on now, for a server about to bind it.

    Chosen at random *below* the kernel's ephemeral range, not by binding port 0: the kernel hands ports
    of that range to every outgoing connection, so a port it picked could be taken as the local end of
    some client connection between this call and the server's bind (the full suite, with a few hundred
    processes connecting, saw a worker's replacement die on ``address already in use``). Two callers may
    still pick the same port at the same moment: callers that can, bind first and hand the socket down
    (``WorkerCluster``, ``agentbus up``); ``redis-server`` cannot, so :func:`start_local_redis` retries.
    ``headroom``: the port plus it must be below the ephemeral range too (a cluster node's bus port).
    """
    ceiling = ephemeral_port_floor() - headroom
    if ceiling <= LOWEST_LISTEN_PORT:  # an unusual ip_local_port_range: let the kernel choose
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            sock.bind(("127.0.0.1", 0))
            chosen: int = sock.getsockname()[1]
            return chosen
    for _ in range(FREE_PORT_TRIES):
        port = random.randrange(LOWEST_LISTEN_PORT, ceiling)
        if all(_bindable(candidate) for candidate in (port, port + headroom)):
            return port
    msg = f"no free port between {LOWEST_LISTEN_PORT} and {ceiling} after {FREE_PORT_TRIES} tries"
    raise RedisServerUnavailable(msg)


def _bindable(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
        return True


@dataclass
class LocalRedis:
    """A ``redis-server`` child process bound to 127.0.0.1 on its own port and directory."""

    port: int
    directory: Path
    appendonly: bool = False
    die_with_parent: bool = False
    """SIGTERM the server when this process dies, even by SIGKILL (Linux; ``agentbus up``)."""
    owns_directory: bool = False
    """The directory is a temp dir made for this server: :meth:`stop` removes it (its data goes with it)."""
    process: subprocess.Popen[bytes] | None = field(default=None, repr=False)

    @property
    def pid(self) -> int | None:
        return self.process.pid if self.process is not None else None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self, *, timeout_s: float = 10.0) -> LocalRedis:
        self.spawn()
        assert self.process is not None
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            self._raise_if_exited()
            if is_reachable(self.url, timeout_s=0.2):
                return self
            time.sleep(0.02)
        self.stop()
        msg = f"redis-server on port {self.port} did not answer within {timeout_s}s"
        raise RedisServerUnavailable(msg)

    def spawn(self) -> None:
        """Start the ``redis-server`` process (without waiting for it to answer: :meth:`until_answering`)."""
        binary = shutil.which("redis-server")
        if binary is None:
            msg = "redis-server is not installed (apt-get install redis-server) and no Redis is reachable"
            raise RedisServerUnavailable(msg)
        self.directory.mkdir(parents=True, exist_ok=True)
        # redis-server changes into --dir before it opens --logfile: a relative path would point elsewhere.
        self.directory = self.directory.resolve()
        args = server_args(binary, self.port, self.directory, appendonly=self.appendonly)
        # Own session: a Ctrl-C meant for the parent must not take Redis down before what writes to it.
        self.process = subprocess.Popen(
            args,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
            preexec_fn=die_with_parent() if self.die_with_parent else None,  # before any thread exists (fork-safe)
        )

    async def until_answering(self, timeout_s: float) -> None:
        """Wait (without blocking the event loop) until the spawned server answers ``PING`` (it may be loading
        its append-only file); raises :class:`RedisServerUnavailable` when it exits first, or does not answer
        within ``timeout_s`` (then it is killed)."""
        deadline = time.monotonic() + timeout_s
        client = aioredis.Redis.from_url(self.url, socket_connect_timeout=0.5, socket_timeout=0.5)
        try:
            while True:
                self._raise_if_exited()
                with contextlib.suppress(redis.RedisError, OSError):
                    if await client.ping():
                        return
                if time.monotonic() > deadline:
                    self.stop(kill=True)
                    msg = f"redis-server on port {self.port} did not answer within {timeout_s:g}s"
                    raise RedisServerUnavailable(msg)
                await asyncio.sleep(0.05)
        finally:
            await client.aclose()

    def _raise_if_exited(self) -> None:
        if self.process is not None and self.process.poll() is not None:
            msg = f"redis-server exited with {self.process.returncode}; see {self.log_path}"
            raise RedisServerUnavailable(msg)

    @property
    def log_path(self) -> Path:
        return self.directory / "redis.log"

    def lost_its_port(self) -> bool:
        """The server exited because its port was taken (its log says so)."""
        try:
            return "Address already in use" in self.log_path.read_text(errors="replace")
        except OSError:
            return False

    def stop(self, *, kill: bool = False) -> None:
        stop_process(self.process, kill=kill)
        if self.owns_directory:
            shutil.rmtree(self.directory, ignore_errors=True)

    def restart(self) -> None:
        """Stop and start again on the same port and directory (data survives only with AOF)."""
        stop_process(self.process)
        self.start()


def server_args(binary: str, port: int, directory: Path, *, appendonly: bool, extra: Sequence[str] = ()) -> list[str]:
    """A loopback ``redis-server`` on ``port`` in ``directory`` (its log there too), no RDB snapshots, AOF
    (everysec) only with ``appendonly``, plus ``extra`` options."""
    return [
        binary,
        "--bind",
        "127.0.0.1",
        "--port",
        str(port),
        "--dir",
        str(directory),
        *extra,
        "--save",
        "",
        "--appendonly",
        "yes" if appendonly else "no",
        "--appendfsync",
        "everysec",
        "--daemonize",
        "no",
        "--logfile",
        str(directory / "redis.log"),
    ]


def stop_process(process: subprocess.Popen[bytes] | None, *, kill: bool = False) -> None:
    """End a redis-server child: SIGTERM (SIGKILL with ``kill``), and SIGKILL if it is still up after 10 s."""
    if process is None or process.poll() is not None:
        return
    if kill:
        process.kill()
    else:
        process.terminate()
    with contextlib.suppress(subprocess.TimeoutExpired):
        process.wait(timeout=10)
    if process.poll() is None:
        process.kill()
        process.wait()


def start_local_redis(
    directory: Path | None = None, *, port: int | None = None, appendonly: bool = False, die_with_parent: bool = False
) -> LocalRedis:
    """Start a private Redis on a free port in ``directory`` (a fresh temp dir by default)."""
    root = directory if directory is not None else Path(tempfile.mkdtemp(prefix="agentbus-redis-"))
    for attempt in range(1, PORT_RACE_RETRIES + 1):
        server = LocalRedis(
            port=port or free_port(),
            directory=root,
            appendonly=appendonly,
            die_with_parent=die_with_parent,
            owns_directory=directory is None,
        )
        try:
            return server.start()
        except RedisServerUnavailable:
            # A port we chose can be taken by another process between the choice and redis-server's bind
            # (it cannot be handed a bound socket): choose again. A port the caller named is theirs to fix.
            if port is not None or attempt == PORT_RACE_RETRIES or not server.lost_its_port():
                raise
    raise AssertionError("unreachable")


PORT_RACE_RETRIES: Final = 5


KEEPER_POLL_INTERVAL_S = 0.2
KEEPER_START_TIMEOUT_S = 60.0
"""How long a restarted private Redis may take to answer (it replays its append-only file first)."""


class PrivateRedisKeeper:
    """Supervises the private Redis ``agentbus up`` started, as the workers are: one that dies is started again
    on the same port, directory and append-only file (so what was written survives; the workers reconnect
    by themselves), with the workers' backoff; one that keeps dying, or does not answer after a restart,
    makes :meth:`watch` raise :class:`SupervisionFailed` (``up`` then stops everything and exits 1)."""

    def __init__(
        self,
        server: LocalRedis,
        *,
        echo: Callable[[str], None],
        policy: RestartPolicy,
        start_timeout_s: float = KEEPER_START_TIMEOUT_S,
    ) -> None:
        self.server = server
        self.echo = echo
        self.policy = policy
        self.start_timeout_s = start_timeout_s
        self.failures = 0
        """Consecutive runs that ended before :attr:`RestartPolicy.stable_after_s`."""
        self.restarts = 0
        self._started_at = time.monotonic()

    async def watch(self) -> None:
        """Until cancelled: restart the server whenever it dies; raises when it keeps dying."""
        while True:
            process = self.server.process
            if process is not None and process.poll() is None:
                if time.monotonic() - self._started_at >= self.policy.stable_after_s:
                    self.failures = 0
                await asyncio.sleep(KEEPER_POLL_INTERVAL_S)
                continue
            await self._restart(process.pid if process is not None else 0, process.returncode if process else None)

    async def _restart(self, pid: int, code: int | None) -> None:
        self.failures += 1
        if self.policy.gives_up(self.failures):
            msg = (
                f"the private Redis at {self.server.url} (pid {pid}) died {self.failures} times in a row "
                f"(last exit code {code}; see {self.server.log_path}): giving up"
            )
            raise SupervisionFailed(msg)
        delay = self.policy.delay_s(self.failures)
        self.echo(
            f"the private Redis (pid {pid}) exited with code {code}; restarting it in {delay:g}s on the same "
            f"append-only file (failure {self.failures} of at most {self.policy.max_restarts})"
        )
        await asyncio.sleep(delay)
        self.server.spawn()
        self._started_at = time.monotonic()
        try:
            await self.server.until_answering(self.start_timeout_s)
        except RedisServerUnavailable as error:
            self.echo(f"the private Redis did not come back: {error}")
            return  # dead (or killed): the next pass counts it
        self.restarts += 1
        self.echo(f"the private Redis restarted: pid {self.server.pid}, {self.server.url}")
