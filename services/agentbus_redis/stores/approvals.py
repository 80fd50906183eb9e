"""Where approvals wait for people (agent-loop.md §H; the rules are in approvals/records.py).

Keys (per-session keys carry the session's shard tag, so each group of writes stays in one Cluster slot):

- ``…:session:<id>:approval:<approval_id>`` hash: ``request`` (:class:`ApprovalRequest` JSON), ``decision``
  (:class:`ApprovalDecision` JSON, set once), ``run_claim`` (the worker that started the allowed tool —
  set once, so an approved tool never runs twice, even when its continuation is redelivered);
- ``…:session:<id>:approvals:parked`` hash: tool_use_id → the park holding it (a re-run job leaves parked
  calls to their park);
- ``…:session:<id>:permissions:updates`` list (+ ``…:applied`` set): the session's "always allow" updates
  (H7), each applied once, folded in order by :func:`agentbus_redis.approvals.records.apply_permission_updates`;
- ``<prefix>{sNN}:approvals:pending`` sorted set per shard: ``<session> <approval_id>`` by request time
  (``agentbus approvals ls``); ``<prefix>approvals:sessions`` hash: approval id → session (``show``);
- ``<prefix>approvals:events`` stream: one entry per request and per decision (the SDK's
  ``bus.approvals()`` follows it).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import orjson
import redis.asyncio as aioredis

from agentbus_redis.approvals.records import (
    ApprovalDecision,
    ApprovalRequest,
    SessionPermissions,
    apply_permission_updates,
    parse_approval_decision,
    parse_approval_request,
)
from agentbus_redis.json_types import JsonValue
from agentbus_redis.streams.topology import Topology

DECIDED_TTL_MS = 7 * 24 * 3600 * 1000
"""A decided approval's record is kept this long (for ``show`` and audit, H7.4)."""
EVENTS_MAXLEN = 10_000

_APPLY_ONCE = """
if redis.call('SADD', KEYS[2], ARGV[1]) == 1 then
  redis.call('RPUSH', KEYS[1], ARGV[2])
  return 1
end
return 0
"""


@dataclass(frozen=True, slots=True)
class StoredApproval:
    """An approval as stored: the request and, once resolved, its decision."""

    request: ApprovalRequest
    decision: ApprovalDecision | None

    @property
    def pending(self) -> bool:
        return self.decision is None


def fold_permission_updates(raw: Sequence[bytes]) -> SessionPermissions | None:
    """The session's rules from its stored update lists, in order (None: it has none)."""
    if not raw:
        return None
    state = SessionPermissions()
    for item in raw:
        updates = orjson.loads(item)
        state = apply_permission_updates(state, updates if isinstance(updates, list) else [])
    return state


class ApprovalStore:
    """Reads and writes the approval keys (see the module docstring)."""

    def __init__(self, redis: aioredis.Redis, topology: Topology) -> None:
        self.redis = redis
        self.topology = topology

    # -- keys ------------------------------------------------------------------------------------

    def record_key(self, session_id: str, approval_id: str) -> str:
        return self.topology.names.session_key(session_id, "approval", approval_id)

    def parked_key(self, session_id: str) -> str:
        return self.topology.names.session_key(session_id, "approvals", "parked")

    def updates_key(self, session_id: str) -> str:
        return self.topology.names.session_key(session_id, "permissions", "updates")

    def applied_key(self, session_id: str) -> str:
        return self.topology.names.session_key(session_id, "permissions", "applied")

    def pending_index(self, shard: int) -> str:
        return self.topology.names.shard_stream(shard, "approvals:pending")

    def pending_index_for(self, session_id: str) -> str:
        return self.pending_index(self.topology.names.shard_of(session_id))

    @property
    def sessions_key(self) -> str:
        return self.topology.names.stream("approvals:sessions")

    @property
    def events_stream(self) -> str:
        return self.topology.names.stream("approvals:events")

    # -- tool worker side ------------------------------------------------------------------------

    async def parked_by(self, session_id: str, tool_use_ids: Sequence[str]) -> dict[str, str]:
        """The park each of these calls is held by (calls never parked are absent)."""
        if not tool_use_ids:
            return {}
        values: list[Any] = await self.redis.hmget(self.parked_key(session_id), list(tool_use_ids))
        return {i: v.decode() for i, v in zip(tool_use_ids, values, strict=True) if v is not None}

    async def put_park(
        self, session_id: str, park_id: str, requests: Sequence[ApprovalRequest], parked_ids: Sequence[str]
    ) -> None:
        """Store a park's requests (kept as first written: a re-run job parks again under the same ids) and
        mark its calls, then announce the requests."""
        pipe = self.redis.pipeline(transaction=False)  # each write is idempotent
        for request in requests:
            pipe.hsetnx(self.record_key(session_id, request.approval_id), "request", request.to_wire_json())
        pipe.hset(self.parked_key(session_id), mapping=dict.fromkeys(parked_ids, park_id))
        waiting_ms = max(request.deadline_ms - request.requested_ms for request in requests)
        pipe.pexpire(self.parked_key(session_id), DECIDED_TTL_MS + waiting_ms)  # outlives every park in it
        # Findable by id before it is listed as pending: a person who lists and then looks one up finds it.
        pipe.hset(self.sessions_key, mapping={request.approval_id: session_id for request in requests})
        await pipe.execute()
        stored = await self.get_many(session_id, [request.approval_id for request in requests])
        pending = [item for item in stored if item.pending]
        if pending:
            index = self.pending_index_for(session_id)
            await self.redis.zadd(
                index, {f"{session_id} {item.request.approval_id}": item.request.requested_ms for item in pending}
            )
        for item in pending:
            await self._announce(item.request, "requested")

    async def resolve(self, session_id: str, approval_id: str, decision: ApprovalDecision) -> StoredApproval | None:
        """Record the decision (once) and take the approval off the pending index. Returns the approval when
        this call recorded the decision (None when it was recorded before, or is unknown)."""
        key = self.record_key(session_id, approval_id)
        first = bool(await self.redis.hsetnx(key, "decision", decision.to_wire_json()))
        pipe = self.redis.pipeline(transaction=False)
        pipe.pexpire(key, DECIDED_TTL_MS)
        pipe.zrem(self.pending_index_for(session_id), f"{session_id} {approval_id}")
        await pipe.execute()
        stored = await self.get(session_id, approval_id)
        if not first or stored is None:
            return None
        await self._announce(stored.request, "decided", decision.outcome)
        return stored

    async def claim_run(self, session_id: str, approval_id: str, consumer: str) -> bool:
        """True for the first worker to start the approved tool; False when one started it before."""
        return bool(await self.redis.hsetnx(self.record_key(session_id, approval_id), "run_claim", consumer))

    async def session_permissions(self, session_id: str) -> SessionPermissions | None:
        raw: Any = await self.redis.lrange(self.updates_key(session_id), 0, -1)
        return fold_permission_updates(raw)

    async def add_permission_updates(self, session_id: str, approval_id: str, updates: Sequence[JsonValue]) -> None:
        """H7: the updates of one answer join the session's rules once (a redelivered continuation adds
        nothing)."""
        if not updates:
            return
        keys = [self.updates_key(session_id), self.applied_key(session_id)]
        await self.redis.eval(_APPLY_ONCE, 2, *keys, approval_id, orjson.dumps(list(updates)))

    async def _announce(self, request: ApprovalRequest, event: str, outcome: str = "") -> None:
        fields = {"event": event, "approval_id": request.approval_id, "session_id": request.session_id}
        if outcome:
            fields["outcome"] = outcome
        await self.redis.xadd(self.events_stream, fields, maxlen=EVENTS_MAXLEN, approximate=True)  # type: ignore[arg-type]

    # -- people's side -----------------------------------------------------------------------------

    async def get(self, session_id: str, approval_id: str) -> StoredApproval | None:
        found = await self.get_many(session_id, [approval_id])
        return found[0] if found else None

    async def get_many(self, session_id: str, approval_ids: Sequence[str]) -> list[StoredApproval]:
        pipe = self.redis.pipeline(transaction=False)
        for approval_id in approval_ids:
            pipe.hmget(self.record_key(session_id, approval_id), ["request", "decision"])
        rows: list[list[bytes | None]] = await pipe.execute()
        return [
            StoredApproval(parse_approval_request(request), parse_approval_decision(decision) if decision else None)
            for request, decision in rows
            if request is not None
        ]

    async def session_of(self, approval_id: str) -> str | None:
        raw = await self.redis.hget(self.sessions_key, approval_id)
        return raw.decode() if isinstance(raw, bytes) else None

    async def find(self, approval_id: str) -> StoredApproval | None:
        session_id = await self.session_of(approval_id)
        return None if session_id is None else await self.get(session_id, approval_id)

    async def pending(self, session_id: str | None = None) -> list[ApprovalRequest]:
        """Pending approvals, oldest first: all, or a session's — with those of its sub-agents' child
        sessions (H8.1: a sub-agent asks through its parent's channel), which may live on any shard."""
        members: list[tuple[str, str, float]] = []
        for shard in range(self.topology.shards):
            rows: Any = await self.redis.zrange(self.pending_index(shard), 0, -1, withscores=True)
            for member, score in rows:
                owner, approval_id = member.decode().split(" ", 1)
                members.append((owner, approval_id, score))
        members.sort(key=lambda row: row[2])
        found: list[ApprovalRequest] = []
        for owner, approval_id, _ in members:
            stored = await self.get(owner, approval_id)
            if stored is None or not stored.pending:
                continue
            if session_id is None or session_id in (owner, stored.request.parent_session_id):
                found.append(stored.request)
        return found

    async def pending_count(self) -> int:
        pipe = self.redis.pipeline(transaction=False)
        for shard in range(self.topology.shards):
            pipe.zcard(self.pending_index(shard))
        return sum(int(count) for count in await pipe.execute())
