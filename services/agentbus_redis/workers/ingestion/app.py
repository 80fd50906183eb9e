"""The ingestion worker process: ``agentbus worker ingestion`` (or ``faststream run
agentbus_redis.workers.ingestion.app:app``)."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable

import structlog

from agentbus_redis.bus.events import DeadlineSweep, IngressEnvelope, StuckTurnSweep
from agentbus_redis.observability.metrics import instrument_handler
from agentbus_redis.runtime.codec import signed_entry_fields
from agentbus_redis.runtime.consumer import BatchConsumer
from agentbus_redis.runtime.lane_worker import LaneWorker
from agentbus_redis.runtime.redis_client import TRANSIENT_ERRORS
from agentbus_redis.stores.tool_catalog import catalog_reader
from agentbus_redis.streams.topology import INGESTION_GROUP
from agentbus_redis.subagents.ingestion_hooks import IngestionAgentHooks
from agentbus_redis.subagents.relay import ChildRelay
from agentbus_redis.workers.ingestion.worker import IngestionWorker
from agentbus_redis.workers.process import WorkerContext

log = structlog.get_logger(__name__)

SWEEP_INTERVAL_S = 1.0
AGENT_FULL_SWEEP_EVERY = 10
"""Every this many sweeps the agent sweep also re-reads running children's logs (lost completions)."""


class IngestionRuntime:
    """Owns ingress shards; also sweeps tool deadlines of its shards (placeholder rule)."""

    def __init__(self, context: WorkerContext) -> None:
        self.context = context
        self.topology = context.topology
        self.worker = IngestionWorker(
            context.redis,
            self.topology,
            tool_deadline_ms=int(context.settings.tools.deadline_s * 1000),
            internal_key=context.settings.require_internal_key(),
            max_entry_bytes=context.settings.max_ingress_entry_bytes,
            idempotency_ttl_ms=int(context.settings.retention.idempotency_keys_ttl_s * 1000),
            stuck_bound_ms=int(context.settings.stuck_turn_s * 1000),
        )
        self.relay = ChildRelay(context.redis, self.topology, internal_key=self.worker.internal_key)
        self.hooks = self.worker.agents = IngestionAgentHooks(self.relay)
        # Each call goes to a pool whose workers have its tool, as the live catalog says (tools/pools.py).
        refresh_s = context.settings.tools.catalog_refresh_s
        self.worker.tool_routes = catalog_reader(context.redis, self.topology, refresh_s=refresh_s).routes
        self._sweeps = 0
        self.lanes = LaneWorker(
            context.redis,
            context.settings.names,
            group=INGESTION_GROUP,
            stream_name="ingress",
            owner=context.owner,
            handler_factory=lambda shard, epoch: instrument_handler("ingestion", self.worker.handler_for(shard, epoch)),
            consumer_config=context.consumer_config(transactional=True),
            lease_config=context.lease_config(),
            on_release=self.worker.forget_shard,
        )
        self._sweeper: asyncio.Task[None] | None = None

    async def start(self) -> None:
        await self.lanes.start()
        self._sweeper = asyncio.create_task(self._sweep_forever(), name="deadline-sweeper")

    async def stop(self) -> None:
        if self._sweeper is not None:
            self._sweeper.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._sweeper
        await self.lanes.stop()

    def consumers(self) -> list[BatchConsumer]:
        return self.lanes.consumers()

    def background_tasks(self) -> dict[str, asyncio.Task[None] | None]:
        return {**self.lanes.background_tasks(), "deadline_sweeper": self._sweeper}

    def groups(self) -> list[tuple[str, str]]:
        return [(stream, INGESTION_GROUP) for stream in self.lanes.streams]

    async def sweep_once(self) -> int:
        """Queue a deadline sweep into the ingress shard of every owned session with an overdue call.

        The sweep goes through the shard's own stream so it is applied in order by the shard owner, like
        any other event; its idempotency key makes a repeated sweep harmless. It is signed with the worker
        secret: a sweep without a valid authenticator is a forgery (bus/internal_events.py).
        """
        now_ms = int(time.time() * 1000)
        return await self._queue_due(self.topology.deadlines, "deadline_sweep", DeadlineSweep(now_ms=now_ms), now_ms)

    async def sweep_stuck_once(self) -> int:
        """Queue a stuck-turn sweep into the ingress shard of every owned session whose wait is past its
        stuck-at score (bus/stuck_turns.py). Applied in order by the shard owner, the ledger decides again
        on the state it has then (a reply that arrived meanwhile wins) and ends the wait or leaves it; the
        idempotency key (session and score) keeps a repeated sweep of the same wait one. Signed like the
        deadline sweep."""
        now_ms = int(time.time() * 1000)
        return await self._queue_due(
            self.topology.stuck_index, "stuck_turn_sweep", StuckTurnSweep(now_ms=now_ms), now_ms
        )

    async def _queue_due(
        self, index: Callable[[int], str], key_prefix: str, payload: DeadlineSweep | StuckTurnSweep, now_ms: int
    ) -> int:
        """One signed ``payload`` into the ingress of every owned session whose score in its shard's
        ``index`` is due; the key (session and score) makes a repeated sweep of the same score one."""
        redis = self.context.redis
        queued = 0
        for shard in self.lanes.owned_shards():
            due = await redis.zrangebyscore(index(shard), "-inf", now_ms, withscores=True)
            for raw_session, score in due:  # type: ignore[str-unpack]
                session = raw_session.decode() if isinstance(raw_session, bytes) else str(raw_session)
                envelope = IngressEnvelope(
                    session_id=session, idempotency_key=f"{key_prefix}:{session}:{int(score)}", payload=payload
                )
                fields = signed_entry_fields(envelope, self.worker.internal_key)
                await redis.xadd(self.topology.ingress(shard), fields)  # type: ignore[arg-type]
                queued += 1
        return queued

    async def sweep_agents_once(self, *, full: bool = True) -> int:
        """Sub-agents of the owned shards: cancellations, wall time, lost completions (subagents)."""
        ended = 0
        for shard in self.lanes.owned_shards():
            ended += await self.hooks.in_order(self.relay.sweep(shard, full=full))
        return ended

    async def _sweep_forever(self) -> None:
        """The sweeps every second for as long as the worker lives: a failed one is tried again at the next
        pass (Redis down or restarting: a warning; anything else, e.g. a refused command (NOPERM), with its
        traceback, so it is seen)."""
        while True:
            await asyncio.sleep(SWEEP_INTERVAL_S)
            try:
                await self.sweep_once()
            except TRANSIENT_ERRORS as error:
                log.warning("deadline_sweep_failed", error=repr(error))
            except Exception:
                log.exception("deadline_sweep_failed")
            try:
                await self.sweep_stuck_once()
            except TRANSIENT_ERRORS as error:
                log.warning("stuck_turn_sweep_failed", error=repr(error))
            except Exception:
                log.exception("stuck_turn_sweep_failed")
            self._sweeps += 1
            try:
                await self.sweep_agents_once(full=self._sweeps % AGENT_FULL_SWEEP_EVERY == 0)
            except TRANSIENT_ERRORS as error:
                log.warning("agent_sweep_failed", error=repr(error))
            except Exception:
                log.exception("agent_sweep_failed")


def create(context: WorkerContext) -> IngestionRuntime:
    return IngestionRuntime(context)


def __getattr__(attribute: str) -> object:
    """``faststream run agentbus_redis.workers.ingestion.app:app``: the ASGI app, built from the environment on first
    use."""
    if attribute == "app":
        from agentbus_redis.workers.process import build_app

        return build_app("ingestion", create)[0]
    raise AttributeError(attribute)
