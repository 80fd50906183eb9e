"""The Redis keys of sub-agents.

- ``session:<child>:agent`` (hash, child's slot): ``record`` (the :class:`ChildRecord` JSON, written once
  with HSETNX: a re-run launch finds it), ``status`` (running / completed / interrupted / failed),
  ``ended_ms``, ``relayed_seq`` (the child's log relayed to the parent as progress up to there).
- ``session:<parent>:agents`` (hash, parent's slot): child session id → the Agent call's tool_use id;
  every child the session ever started (the tree).
- ``session:<parent>:agents:running`` (set, parent's slot): its children still running (fan-out limit).
- ``session:<parent>:agents:cancel`` (string, parent's slot): epoch ms of the parent's last ``user_cancel``
  interrupt that reached running tools; written by ingestion in the same script as the interrupt (so it is
  never lost), read by the sweep to cancel children a crash kept from being cancelled.
- ``{shard}:agents:running`` (sorted set, the CHILD's shard): running children scored by their deadline;
  the sweep of the shard's ingestion owner enforces wall time and recovers lost completions from it.
- ``agents:by-id:<agentId>`` (string, its own slot): the child session of an agentId, so ``SendMessage``
  tells an unknown agent from another session's (A4.4) and ``agentbus agents stop`` finds it by agentId.

Commands touch one key each (parent and child live in different slots): no cross-slot transaction.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

import redis.asyncio as aioredis

from agentbus_redis.agents.record import ChildRecord, ChildStatus
from agentbus_redis.streams.topology import Topology


def _text(value: object) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


@dataclass(frozen=True, slots=True)
class AgentKeys:
    topology: Topology

    def child(self, child_session_id: str) -> str:
        return self.topology.names.session_key(child_session_id, "agent")

    def children(self, parent_session_id: str) -> str:
        return self.topology.names.session_key(parent_session_id, "agents")

    def running_children(self, parent_session_id: str) -> str:
        return self.topology.names.session_key(parent_session_id, "agents", "running")

    def cancel(self, parent_session_id: str) -> str:
        return self.topology.names.session_key(parent_session_id, "agents", "cancel")

    def running_index(self, shard: int) -> str:
        return self.topology.names.shard_stream(shard, "agents:running")

    def running_index_for(self, child_session_id: str) -> str:
        return self.running_index(self.topology.names.shard_of(child_session_id))

    def by_agent_id(self, agent_id: str) -> str:
        return self.topology.names.stream(f"agents:by-id:{agent_id}")


class AgentStore:
    """Reads and writes the keys above."""

    def __init__(self, redis: aioredis.Redis, topology: Topology) -> None:
        self.redis = redis
        self.keys = AgentKeys(topology)

    async def reserve(self, record: ChildRecord, max_children: int) -> int:
        """Count the child among its parent's running children; returns how many run now (itself
        included). Idempotent: a re-run launch of the same child counts once."""
        key = self.keys.running_children(record.parent_session_id)
        pipe = self.redis.pipeline(transaction=True)
        pipe.sadd(key, record.session_id)
        pipe.scard(key)
        _, running = await pipe.execute()
        return int(running)

    async def release(self, parent_session_id: str, child_session_id: str) -> None:
        await self.redis.srem(self.keys.running_children(parent_session_id), child_session_id)

    async def register(self, record: ChildRecord) -> bool:
        """Write the child's record and link it to its parent; False when it existed (a re-run launch)."""
        created = await self.redis.hsetnx(self.keys.child(record.session_id), "record", record.to_wire_json())
        await self.link(record)
        return bool(created)

    async def link(self, record: ChildRecord) -> None:
        """What :meth:`register` writes after the record: the child running (unless it has a status already), in
        its parent's children, in the deadline index while it runs, findable by agent id. Idempotent, and called
        again by a re-run launch: a worker killed between the record and these left a child its parent did not
        list (the full suite under load lost two of three children from ``children()`` that way)."""
        key = self.keys.child(record.session_id)
        await self.redis.hsetnx(key, "status", "running")
        await self.redis.hset(
            self.keys.children(record.parent_session_id), record.session_id, record.parent_tool_use_id
        )
        if _text(await self.redis.hget(key, "status")) == "running":
            await self.redis.zadd(
                self.keys.running_index_for(record.session_id), {record.session_id: record.deadline_ms}, nx=True
            )
        await self.redis.set(self.keys.by_agent_id(record.agent_id), record.session_id)

    async def restart(self, record: ChildRecord) -> None:
        """A4.4 (``SendMessage``): the ended child runs another round — its record (the new call, times and
        prompt) replaces the old one, and it is running again. The record is written before the status, so
        a relay that sees ``running`` reads this round's record."""
        key = self.keys.child(record.session_id)
        await self.redis.hset(key, "record", record.to_wire_json())
        pipe = self.redis.pipeline(transaction=True)
        pipe.hdel(key, "ended_ms")
        pipe.hset(key, "status", "running")
        await pipe.execute()
        await self.redis.zadd(self.keys.running_index_for(record.session_id), {record.session_id: record.deadline_ms})

    async def find(self, agent_id: str) -> str | None:
        """The child session of ``agent_id`` (None: no such agent)."""
        raw = await self.redis.get(self.keys.by_agent_id(agent_id))
        return _text(raw) if raw is not None else None

    async def record(self, child_session_id: str) -> tuple[ChildRecord, ChildStatus] | None:
        raw = await self.redis.hmget(self.keys.child(child_session_id), ["record", "status"])
        if raw[0] is None:
            return None
        status = _text(raw[1]) if raw[1] is not None else "running"
        return ChildRecord.model_validate_json(raw[0]), status  # type: ignore[return-value]

    async def end(self, record: ChildRecord, status: ChildStatus, now_ms: int) -> bool:
        """Mark the child ended; False when it had ended already (someone else answered the parent)."""
        key = self.keys.child(record.session_id)
        # HSETNX claims the end atomically: of a relay and a sweep (or a cascade) racing, one answers.
        if not await self.redis.hsetnx(key, "ended_ms", now_ms):
            return False
        await self.redis.hset(key, "status", status)
        await self.unindex(record)
        return True

    async def unindex(self, record: ChildRecord) -> None:
        """Drop an ended child from the running index and its parent's running set."""
        await self.redis.zrem(self.keys.running_index_for(record.session_id), record.session_id)
        await self.release(record.parent_session_id, record.session_id)

    async def relayed_seq(self, child_session_id: str) -> int:
        """How far the child's log was relayed to its parent (0: nothing yet)."""
        raw = await self.redis.hget(self.keys.child(child_session_id), "relayed_seq")
        return int(raw) if raw is not None else 0

    async def set_relayed_seq(self, child_session_id: str, seq: int) -> None:
        await self.redis.hset(self.keys.child(child_session_id), "relayed_seq", seq)

    async def children(self, parent_session_id: str) -> dict[str, str]:
        """Every child ``parent_session_id`` started: child session id → tool_use id."""
        raw = await self.redis.hgetall(self.keys.children(parent_session_id))
        return {_text(child): _text(tool_use_id) for child, tool_use_id in raw.items()}

    async def statuses(self, child_session_ids: Iterable[str]) -> dict[str, str]:
        ids = list(child_session_ids)
        pipe = self.redis.pipeline(transaction=False)
        for child in ids:
            pipe.hget(self.keys.child(child), "status")
        values = await pipe.execute()
        return {child: _text(value) for child, value in zip(ids, values, strict=True) if value is not None}

    async def running(self, shard: int, *, due_before_ms: float = float("inf")) -> list[tuple[str, int]]:
        """Running children of the (child) shard, with their deadlines (only those due when given)."""
        raw = await self.redis.zrangebyscore(self.keys.running_index(shard), "-inf", due_before_ms, withscores=True)
        return [(_text(child), int(score)) for child, score in raw]  # type: ignore[str-unpack]

    async def cancelled_at(self, parent_session_id: str) -> int | None:
        raw = await self.redis.get(self.keys.cancel(parent_session_id))
        return int(raw) if raw is not None else None
