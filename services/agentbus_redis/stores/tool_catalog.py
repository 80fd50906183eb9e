"""The tool catalog on the bus: tool workers publish what they can run, the model worker offers the union.

One Redis hash, ``Topology.tool_catalog`` (one key, so one Cluster slot): field = a tool worker's consumer id,
value = its :class:`agentbus_redis.tools.catalog.CatalogEntry` as JSON. A tool worker writes its entry when it starts
(before it reads a job), rewrites it every ``refresh_s`` with ``expires_ms`` = now + ``ttl_s``, and removes it
on a graceful stop. A worker that dies stops refreshing: its entry expires and the next reader prunes it.

Prune is compare-and-delete (a script): a reader deletes an expired field only if it still holds the value
the reader saw, so a worker that refreshed in between (back from a long pause) is never erased.

Expiry compares epoch milliseconds from the writer's clock with the reader's: keep ``ttl_s`` well above the
clock skew between hosts (NTP keeps it to milliseconds; the default TTL is 30 s).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import redis.asyncio as aioredis
from pydantic import ValidationError
from redis.exceptions import RedisError

from agentbus_redis.clock import epoch_ms
from agentbus_redis.runtime.key_calls import ServerScript
from agentbus_redis.runtime.lazy_log import get_logger
from agentbus_redis.runtime.periodic import PeriodicTask
from agentbus_redis.streams.topology import Topology
from agentbus_redis.tools.catalog import (
    CatalogEntry,
    HeldEntry,
    McpServerStatus,
    hold_recently_live,
    merge_catalog,
)
from agentbus_redis.tools.definitions import ToolDefinition
from agentbus_redis.tools.pools import DEFAULT_POOL, ToolRoutes, tool_routes

log = get_logger(__name__)

DEFAULT_REFRESH_S = 10.0
DEFAULT_TTL_S = 30.0
PUBLISH_RETRY_MAX_S = 1.0
READ_MAX_AGE_S = 1.0
"""How old a worker's read of the catalog may be (:func:`catalog_reader`)."""
"""A publisher whose refresh failed (Redis away) tries again at least this often: its entry is back within about
a second of Redis (readers hold what they saw live for a refresh interval plus this, :class:`ToolCatalogCache`)."""

_DELETE_IF_UNCHANGED = ServerScript(
    """
local removed = 0
for i = 1, #ARGV, 2 do
  if redis.call('HGET', KEYS[1], ARGV[i]) == ARGV[i + 1] then
    removed = removed + redis.call('HDEL', KEYS[1], ARGV[i])
  end
end
return removed
"""
)
"""ARGV: field, value, field, value, …: each field is deleted only while it still holds that value."""


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value


@dataclass(frozen=True, slots=True)
class InvalidCatalogEntry:
    """A field whose value is not a catalog entry (written by something else, or a newer format): shown by
    ``agentbus tools ls``, logged and left alone by readers (never offered, never deleted)."""

    worker: str
    error: str


@dataclass(frozen=True, slots=True)
class CatalogSnapshot:
    """The hash as one read saw it, split by what each field holds."""

    now_ms: int
    live: list[CatalogEntry] = field(default_factory=list)
    expired: list[tuple[CatalogEntry, bytes | str]] = field(default_factory=list)
    """Each expired entry with its raw value (what the compare-and-delete prune compares)."""
    invalid: list[InvalidCatalogEntry] = field(default_factory=list)

    def tools(self) -> list[ToolDefinition]:
        return merge_catalog(self.live, now_ms=self.now_ms)

    def routes(self) -> ToolRoutes:
        """Which pool runs each tool (tools/pools.py)."""
        return tool_routes(self.live, now_ms=self.now_ms)


async def read_catalog_snapshot(
    redis: aioredis.Redis, topology: Topology, *, now_ms: Callable[[], int] = epoch_ms
) -> CatalogSnapshot:
    """Every field of the catalog hash, parsed (no write)."""
    raw: dict[Any, Any] = await redis.hgetall(topology.tool_catalog)
    snapshot = CatalogSnapshot(now_ms())
    for worker_field, value in raw.items():
        worker = _text(worker_field)
        try:
            entry = CatalogEntry.model_validate_json(value)
        except ValidationError as error:
            snapshot.invalid.append(InvalidCatalogEntry(worker, str(error.errors(include_url=False)[0]["msg"])))
            continue
        if entry.live(snapshot.now_ms):
            snapshot.live.append(entry)
        else:
            snapshot.expired.append((entry, value))
    snapshot.live.sort(key=lambda entry: entry.worker)
    return snapshot


def snapshot_json(snapshot: CatalogSnapshot) -> dict[str, Any]:
    """What ``tools ls --json`` prints: the live workers, the merged definitions the model is offered, which pool
    runs each tool, and any field that is not a catalog entry."""
    return {
        "workers": [
            {
                "worker": entry.worker,
                "pool": entry.pool,
                "refreshed_ms": entry.refreshed_ms,
                "expires_ms": entry.expires_ms,
                "age_s": round(max(snapshot.now_ms - entry.refreshed_ms, 0) / 1000, 3),
                "tools": [tool.name for tool in entry.tools],
                "mcp_servers": [server.to_wire() for server in entry.mcp_servers],
            }
            for entry in snapshot.live
        ],
        "tools": [tool.to_wire() for tool in snapshot.tools()],
        "pools": dict(sorted(snapshot.routes().pool_of_tool.items())),
        "invalid": [{"worker": invalid.worker, "error": invalid.error} for invalid in snapshot.invalid],
    }


async def prune_expired(redis: aioredis.Redis, topology: Topology, snapshot: CatalogSnapshot) -> int:
    """Delete the snapshot's expired fields that still hold what the snapshot saw; returns how many went."""
    if not snapshot.expired:
        return 0
    args: list[bytes | str] = []
    for entry, value in snapshot.expired:
        args += [entry.worker, value]
    removed = int(await _DELETE_IF_UNCHANGED.run(redis, [topology.tool_catalog], args))
    if removed:
        log.info("tool_catalog_pruned", workers=[entry.worker for entry, _ in snapshot.expired], removed=removed)
    return removed


async def read_tool_catalog(redis: aioredis.Redis, topology: Topology) -> list[ToolDefinition]:
    """The union of the tools every live tool worker can run, sorted by name (expired worker entries ignored and
    pruned; one tool offered by two workers with different definitions: the most recently refreshed wins)."""
    return (await _read_and_prune(redis, topology)).tools()


async def read_tool_routes(redis: aioredis.Redis, topology: Topology) -> ToolRoutes:
    """Which pool runs each tool the live workers offer (expired entries ignored and pruned)."""
    return (await _read_and_prune(redis, topology)).routes()


async def _read_and_prune(
    redis: aioredis.Redis, topology: Topology, *, now_ms: Callable[[], int] = epoch_ms
) -> CatalogSnapshot:
    snapshot = await read_catalog_snapshot(redis, topology, now_ms=now_ms)
    for invalid in snapshot.invalid:
        log.warning("tool_catalog_entry_invalid", worker=invalid.worker, error=invalid.error)
    await prune_expired(redis, topology, snapshot)
    return snapshot


class ToolCatalogCache:
    """The catalog read at most once per ``max_age_s`` (a model worker asks for every request, ingestion for
    every batch that dispatches tool calls; the catalog changes when workers come and go). With ``hold_s``, an
    entry seen live counts as live for that long after it went missing or expired
    (:func:`agentbus_redis.tools.catalog.hold_recently_live`): tools neither vanish from requests nor lose their
    pool while their workers write their entries again after a Redis outage."""

    def __init__(
        self,
        redis: aioredis.Redis,
        topology: Topology,
        *,
        max_age_s: float = 1.0,
        hold_s: float = 0.0,
        monotonic: Callable[[], float] = time.monotonic,
        now_ms: Callable[[], int] = epoch_ms,
    ) -> None:
        self.redis = redis
        self.topology = topology
        self.max_age_s = max_age_s
        self.hold_ms = int(hold_s * 1000)
        self._monotonic = monotonic
        self._now_ms = now_ms
        self._held: dict[str, HeldEntry] = {}
        self._snapshot = CatalogSnapshot(0)
        self._read_at: float | None = None

    async def _fresh(self) -> CatalogSnapshot:
        now = self._monotonic()
        if self._read_at is None or now - self._read_at >= self.max_age_s:
            snapshot = await _read_and_prune(self.redis, self.topology, now_ms=self._now_ms)
            self._held = hold_recently_live(self._held, snapshot.live, now_ms=snapshot.now_ms, hold_ms=self.hold_ms)
            held = [seen for seen in self._held.values() if seen.missing_since_ms is not None]
            if any(seen.missing_since_ms == snapshot.now_ms for seen in held):
                workers = sorted(seen.entry.worker for seen in held)
                log.info("tool_catalog_entries_held", workers=workers, hold_s=self.hold_ms / 1000)
            # A held entry counts as live for this read (its expiry moved just past it).
            still_live = [seen.entry.model_copy(update={"expires_ms": snapshot.now_ms + 1}) for seen in held]
            live = sorted([*snapshot.live, *still_live], key=lambda entry: entry.worker)
            self._snapshot = replace(snapshot, live=live)
            self._read_at = self._monotonic()
        return self._snapshot

    async def tools(self) -> list[ToolDefinition]:
        return (await self._fresh()).tools()

    async def routes(self) -> ToolRoutes:
        return (await self._fresh()).routes()


def catalog_reader(redis: aioredis.Redis, topology: Topology, *, refresh_s: float) -> ToolCatalogCache:
    """The cache a worker reads the catalog through (the model worker's tools, ingestion's routes): read at most
    once a second — the catalog changes when tool workers come and go, not per request — and holding what was
    live while its worker writes it again after a Redis outage: a refresh interval (``refresh_s``, the
    deployment's ``catalog_refresh_s``), the publisher's retry and the cache's own age."""
    return ToolCatalogCache(
        redis, topology, max_age_s=READ_MAX_AGE_S, hold_s=refresh_s + PUBLISH_RETRY_MAX_S + READ_MAX_AGE_S
    )


class ToolCatalogPublisher(PeriodicTask):
    """A tool worker's entry in the catalog: :meth:`publish` once at start, then rewritten every ``refresh_s``
    by the periodic loop (:meth:`start_refreshing`) for as long as the worker lives — through Redis errors and
    restarts (an entry a restarted Redis lost is written again at the next pass), never stopping on a failed
    pass — and removed by :meth:`withdraw` on a graceful stop."""

    task_name = "tool_catalog"
    failure_event = "tool_catalog_refresh_failed"
    retry_max_s = PUBLISH_RETRY_MAX_S

    def __init__(
        self,
        redis: aioredis.Redis,
        topology: Topology,
        *,
        worker: str,
        tools: Sequence[ToolDefinition],
        pool: str = DEFAULT_POOL,
        refresh_s: float = DEFAULT_REFRESH_S,
        ttl_s: float = DEFAULT_TTL_S,
        now_ms: Callable[[], int] = epoch_ms,
    ) -> None:
        if ttl_s <= refresh_s:
            raise ValueError(f"the catalog TTL ({ttl_s}s) must exceed the refresh interval ({refresh_s}s)")
        super().__init__(refresh_s)
        self.redis = redis
        self.topology = topology
        self.worker = worker
        self.tools = list(tools)
        self.pool = pool
        self.ttl_ms = int(ttl_s * 1000)
        self.now_ms = now_ms
        self.refreshes = 0
        self.mcp_servers: list[McpServerStatus] = []
        """The worker's MCP servers and their state (shown by ``agentbus tools ls``)."""

    def entry(self) -> CatalogEntry:
        now = self.now_ms()
        servers = {"mcp_servers": self.mcp_servers} if self.mcp_servers else {}
        return CatalogEntry(
            worker=self.worker,
            refreshed_ms=now,
            expires_ms=now + self.ttl_ms,
            tools=self.tools,
            pool=self.pool,
            **servers,
        )

    async def publish(self) -> None:
        """Write (or rewrite) this worker's entry with a fresh expiry."""
        await self.redis.hset(self.topology.tool_catalog, self.worker, self.entry().to_wire_json())
        self.refreshes += 1

    async def tick(self) -> None:
        await self.publish()

    def start_refreshing(self) -> asyncio.Task[None]:
        """Start the refresh loop; its first pass one ``refresh_s`` after the :meth:`publish` of the start."""
        return self.start(first_after_s=self.interval_s)

    async def withdraw(self) -> None:
        """Stop refreshing and remove this worker's entry (a Redis error is logged: the entry then expires)."""
        await self.stop()
        try:
            await self.redis.hdel(self.topology.tool_catalog, self.worker)
        except (RedisError, OSError) as error:
            log.warning("tool_catalog_withdraw_failed", worker=self.worker, error=repr(error))
