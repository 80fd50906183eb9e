"""The Redis client of every process of the bus (workers, SDK, console, ``agentbus up``): one Redis, or a Redis
Cluster named by a ``redis+cluster://`` URL.

No per-command socket timeout. redis-py 8 defaults to 5 s, and with a timeout every command's send runs
in an ``asyncio.wait_for`` task and every reply read (each command of a pipeline, each ``QUEUED`` of a
transaction) under an asyncio timeout: ≈ 150 µs of CPU and two extra event-loop turns per awaited round
trip on this machine, a fifth of a worker's cost per batch at 1k events/s (redis-streams-baseline.md §8:
round trips dominate). And on Python 3.11 that ``wait_for`` loses cancellations: a cancel that lands after the
send finished but before the awaiting task resumed is swallowed (``wait_for`` returns the send's result,
CPython gh-86296, fixed in 3.12), so the command goes on as if never cancelled — about a quarter of the cancels
that land on a command (``tests/services/test_redis_client_cancellation.py``), and a task that ends only by
being cancelled (a watcher, a keep-alive loop, an SDK reader under ``asyncio.timeout``) runs on forever while
whoever awaits its end hangs. Hence :func:`connect` gives every client these options, not only the workers'.
A dead peer is detected by TCP instead, within ≈ 10 s:

- a Redis restart or a closed connection: reset / EOF at once (the consumers' reconnect path);
- a peer that vanished while a command is unacknowledged: ``TCP_USER_TIMEOUT`` (Linux);
- a peer that vanished while the connection is idle or waiting for a reply: keepalive probes.

Every blocking command the workers send is bounded server-side (``XREADGROUP BLOCK``), so a live Redis
always answers; a Redis that is alive but stuck shows up in the liveness check (consumer progress).

**Cluster mode.** ``redis+cluster://[user:password@]host:port[?seeds=host:port,…]`` (``rediss+cluster://``
with TLS) names a Redis Cluster by any of its nodes; the ``seeds`` are more nodes to try when that one is
down at start. Ordinary commands go through redis-py's ``RedisCluster`` (slot routing, ``MOVED``/``ASK``,
failover). A lane's own connection (:func:`lane_client`) is pinned to the node that serves its stream's
slot: it resolves that node from the cluster's slot map whenever it connects, and a ``MOVED``, ``ASK``,
``TRYAGAIN`` or ``CLUSTERDOWN`` reply on it (the slot moved, is moving, or its master failed) refreshes
the map and drops the connection, raised as :class:`SlotMoved` — a ``ConnectionError``, so the consumer
takes its reconnect path: re-read its pending list on the slot's new node. Nothing ran for a command that
got such a reply, and a lane's batch is one fenced script, so a batch retried there is applied once.
"""

from __future__ import annotations

import socket
from typing import Any, TypeVar, cast
from urllib.parse import parse_qs, urlsplit, urlunsplit

import redis.asyncio as aioredis
from redis.asyncio.cluster import ClusterNode, RedisCluster
from redis.asyncio.connection import AbstractConnection, Connection, ConnectionPool, SSLConnection
from redis.exceptions import (
    AskError,
    BusyLoadingError,
    ClusterDownError,
    ClusterError,
    ReadOnlyError,
    ResponseError,
    SlotNotCoveredError,
    TryAgainError,
)
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import TimeoutError as RedisTimeoutError

HEALTH_CHECK_INTERVAL_S = 30
DEAD_PEER_TIMEOUT_MS = 10_000
CLUSTER_SCHEMES = {"redis+cluster": "redis", "rediss+cluster": "rediss"}
"""URL schemes that name a Redis Cluster, and the plain scheme of each of its nodes."""


TRANSIENT_ERRORS: tuple[type[Exception], ...] = (
    RedisConnectionError,
    RedisTimeoutError,
    BusyLoadingError,
    OSError,
    ClusterDownError,  # a master failed and no replica took over yet (or the cluster lost its majority)
    TryAgainError,  # a multi-key command during a slot migration
    AskError,  # MOVED or ASK seen by a client that does not follow them (a pinned connection: SlotMoved)
    SlotNotCoveredError,
    ClusterError,  # RedisCluster gave up following redirections for now
    ReadOnlyError,  # a master demoted by a failover, still answering: its writes are refused, nothing ran
)
"""Errors of a Redis (or Cluster) that is unavailable for now: wait and retry, nothing is wrong with the data.
(``UNBLOCKED``, a blocking read ended by a failover, arrives as :class:`Unblocked`, a ``ConnectionError``.)"""

REDIS_UNAVAILABLE_ERRORS: tuple[type[Exception], ...] = tuple(
    error for error in TRANSIENT_ERRORS if error is not OSError
)
""":data:`TRANSIENT_ERRORS` that only Redis raises (an ``OSError`` of a handler may be its own, e.g. a file)."""


class Unblocked(RedisConnectionError):
    """Redis ended a blocking command with ``UNBLOCKED``: the node stopped being a master while the command waited
    (a failover demoted it; Redis 7 unblocks such clients). Nothing was read or taken. redis-py raises it as a
    plain ``ResponseError``, which crashed every consumer blocked on a failed-over master (seen in
    ``bench/soak.py --cluster``: model and tool workers' lanes died, and an SDK caller got the error); as a
    ``ConnectionError`` the connection is dropped and the command is sent again, to the slot's new master."""


class SlotMoved(RedisConnectionError):
    """A pinned lane connection was answered ``MOVED``/``ASK``/``TRYAGAIN``/``CLUSTERDOWN``: the command did
    not run; the connection was dropped and reconnects to the slot's current node."""


def _tcp_options() -> dict[int, int]:
    """Keepalive after 5 s idle, then every 1 s, 5 probes; unacknowledged writes fail after 10 s."""
    wanted = {"TCP_KEEPIDLE": 5, "TCP_KEEPINTVL": 1, "TCP_KEEPCNT": 5, "TCP_USER_TIMEOUT": DEAD_PEER_TIMEOUT_MS}
    return {getattr(socket, name): value for name, value in wanted.items() if hasattr(socket, name)}


def _options() -> dict[str, Any]:
    return {
        "health_check_interval": HEALTH_CHECK_INTERVAL_S,
        "socket_timeout": None,
        "socket_keepalive": True,
        "socket_keepalive_options": _tcp_options(),
    }


def is_cluster_url(url: str) -> bool:
    """Whether ``url`` names a Redis Cluster (``redis+cluster://`` or ``rediss+cluster://``)."""
    return urlsplit(url).scheme in CLUSTER_SCHEMES


def cluster_node_url(url: str) -> tuple[str, list[tuple[str, int]]]:
    """The plain ``redis://`` URL of a cluster URL's first node (credentials kept) and its other seeds."""
    parts = urlsplit(url)
    query = parse_qs(parts.query)
    seeds = []
    for seed in ",".join(query.get("seeds", [])).split(","):
        if seed:
            host, _, port = seed.rpartition(":")
            seeds.append((host, int(port)))
    return urlunsplit((CLUSTER_SCHEMES[parts.scheme], parts.netloc, "", "", "")), seeds


def pubsub_url(url: str) -> str:
    """The URL of the pub/sub connection (FastStream's broker, the interrupt channel): on a cluster, its first
    node — a cluster forwards every ``PUBLISH`` to all nodes, so any node's subscribers hear it."""
    return cluster_node_url(url)[0] if is_cluster_url(url) else url


class _ClosedUnderWrite:
    """Mixin of a connection whose write fails with ``ConnectionError`` when another task closed it meanwhile.

    redis-py 8.1 closes connections that other tasks are using — a cluster client drops a failed node's
    connections when it refreshes its slot map after a failover — and a task that was writing on one then gets
    ``AttributeError: 'NoneType' object has no attribute 'writelines'`` (its writer is gone), an error no retry
    layer knows: a client gave up on a publish in the middle of a failover that way (issue 25). Upstream fixed it
    (redis/redis-py#4288, merged after 8.1.0, unreleased); until a release has it, this turns that error into
    the ``ConnectionError`` it is, which every caller here rides out."""

    async def send_packed_command(self, command: Any, check_health: bool = True) -> None:
        try:
            await super().send_packed_command(command, check_health)  # type: ignore[misc]
        except (AttributeError, TypeError) as error:
            if "'NoneType'" not in str(error):
                raise
            raise RedisConnectionError(f"connection closed while writing to it ({error})") from error


class _UnblockedIsUnavailable:
    """Mixin of a connection that raises an ``UNBLOCKED`` reply as :class:`Unblocked`, after dropping the
    connection: replies queued behind the blocking command (a fenced read's take script) are dropped with it."""

    async def read_response(self, *args: Any, **kwargs: Any) -> Any:
        try:
            return await super().read_response(*args, **kwargs)  # type: ignore[misc]
        except ResponseError as error:
            if not str(error).startswith("UNBLOCKED"):
                raise
            await self.disconnect()  # type: ignore[attr-defined]
            raise Unblocked(str(error)) from error


AnyConnection = TypeVar("AnyConnection", bound=AbstractConnection)


class ClosableConnection(_ClosedUnderWrite, _UnblockedIsUnavailable, Connection):
    """A TCP connection (see :class:`_ClosedUnderWrite` and :class:`_UnblockedIsUnavailable`)."""


class ClosableSSLConnection(_ClosedUnderWrite, _UnblockedIsUnavailable, SSLConnection):
    """A TLS connection (see :class:`_ClosedUnderWrite` and :class:`_UnblockedIsUnavailable`)."""


def _closable(connection_class: type[AnyConnection]) -> type[AnyConnection]:
    """The class of :class:`_ClosedUnderWrite` for a plain TCP or TLS connection (others are left as they are)."""
    if connection_class is SSLConnection:
        return cast("type[AnyConnection]", ClosableSSLConnection)
    if connection_class is Connection:
        return cast("type[AnyConnection]", ClosableConnection)
    return connection_class


def connect(url: str, **options: Any) -> aioredis.Redis:
    """A client for ``url``: ``Redis``, or ``RedisCluster`` for a cluster URL (no connection is made yet).

    A ``RedisCluster`` is returned under the ``Redis`` type: it serves the same command methods (routed by
    key slot), pipelines (split by node) and scripts (sent to their keys' node) the workers use; what needs
    one connection (a lane's) asks :func:`lane_client`.
    """
    options = {**_options(), **options}
    if not is_cluster_url(url):
        client = aioredis.Redis.from_url(url, **options)
        pool = client.connection_pool
        pool.connection_class = _closable(pool.connection_class)
        return client
    node_url, seeds = cluster_node_url(url)
    # reinitialize_steps=0: on every 5th MOVED redis-py 8.1 closes the whole client, connections other tasks are
    # using included (they then fail with AttributeError mid-command); a MOVED patches the slot map instead.
    options.setdefault("reinitialize_steps", 0)
    startup = [ClusterNode(host, port) for host, port in seeds]
    cluster = RedisCluster.from_url(node_url, startup_nodes=startup or None, **options)
    # RedisCluster takes no connection class: set it where its nodes take theirs (none has connected yet).
    manager = cluster.nodes_manager
    manager.connection_kwargs["connection_class"] = _closable(manager.connection_kwargs["connection_class"])
    for node in [*manager.startup_nodes.values(), *manager.nodes_cache.values()]:
        node.connection_class = _closable(node.connection_class)
    return cast("aioredis.Redis", cluster)


def worker_redis(url: str) -> aioredis.Redis:
    """A worker's client for ``url`` (returns bytes): :func:`connect`'s, tuned as the module docstring says."""
    return connect(url)


def lane_client(redis: aioredis.Redis, key: str) -> aioredis.Redis:
    """A client with one connection of its own, for the commands of one slot (``key``'s): ``Redis.client()``
    on one Redis; on a cluster, a connection pinned to the node serving ``key``'s slot (module docstring)."""
    if not isinstance(redis, RedisCluster):
        return redis.client()
    return _pinned(redis, key, single_connection=True)


def pinned_pool_client(redis: aioredis.Redis, key: str) -> aioredis.Redis:
    """A client whose connections (a pipeline's, a ``WAIT`` after writes) reach the node of ``key``'s slot:
    ``redis`` itself on one Redis; on a cluster, a pool of connections pinned like :func:`lane_client`'s."""
    if not isinstance(redis, RedisCluster):
        return redis
    return _pinned(redis, key, single_connection=False)


def _pinned(redis: RedisCluster, key: str, *, single_connection: bool) -> aioredis.Redis:
    kwargs = dict(redis.nodes_manager.connection_kwargs)
    kwargs.pop("max_connections", None)
    kwargs.pop("response_callbacks", None)  # a ClusterNode keeps these; the Redis client below has its own
    plain = kwargs.pop("connection_class", Connection)
    pinned = SlotSSLConnection if issubclass(plain, SSLConnection) else SlotConnection
    pool = ConnectionPool(connection_class=pinned, cluster=redis, key=key, **kwargs)
    client = aioredis.Redis(connection_pool=pool, single_connection_client=single_connection)
    client.auto_close_connection_pool = True
    return client


async def node_of(redis: aioredis.Redis, key: str) -> str | None:
    """``host:port`` of the node serving ``key``'s slot on a cluster; None on one Redis."""
    if not isinstance(redis, RedisCluster):
        return None
    await redis.initialize()
    node = redis.get_node_from_key(key)
    return None if node is None else f"{node.host}:{node.port}"


_SLOT_ERRORS = (AskError, TryAgainError, ClusterDownError)
"""Replies that mean the slot is served elsewhere now, or soon (``MovedError`` is an ``AskError``)."""


class _PinnedToSlot:
    """Mixin of a connection that connects to whichever node serves ``key``'s slot (see the module docstring)."""

    host: str
    port: int

    def __init__(self, *, cluster: RedisCluster, key: str, **kwargs: Any) -> None:
        kwargs.pop("host", None)
        kwargs.pop("port", None)
        super().__init__(**kwargs)
        self._cluster = cluster
        self._key = key
        self._map_stale = False

    async def _connect(self) -> None:
        if self._map_stale:
            await self._cluster.nodes_manager.initialize()
            self._map_stale = False
        else:
            await self._cluster.initialize()
        node = self._cluster.get_node_from_key(self._key)
        if node is None:
            msg = f"no node serves the slot of {self._key}"
            raise SlotMoved(msg)
        self.host, self.port = node.host, int(node.port)
        try:
            await super()._connect()  # type: ignore[misc]
        except Exception:
            self._map_stale = True  # e.g. a failed master: ask the cluster again next time
            raise

    async def read_response(self, *args: Any, **kwargs: Any) -> Any:
        try:
            return await super().read_response(*args, **kwargs)  # type: ignore[misc]
        except _SLOT_ERRORS as error:
            self._map_stale = True
            await self.disconnect()  # type: ignore[attr-defined]
            raise SlotMoved(f"{self._key}: {error}") from error
        except (RedisConnectionError, OSError):
            self._map_stale = True
            raise


class SlotConnection(_PinnedToSlot, ClosableConnection):
    """A TCP connection pinned to a key's slot."""


class SlotSSLConnection(_PinnedToSlot, ClosableSSLConnection):
    """A TLS connection pinned to a key's slot."""
