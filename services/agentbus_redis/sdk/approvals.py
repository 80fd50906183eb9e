"""Answering approvals from Python (agent-loop.md §H; the CLI ``agentbus approvals`` uses the same calls).

    async with AgentbusClient.connect() as bus:
        async for req in bus.approvals(session_id=None):
            print(req.tool_name, req.input, req.request.request_message)
            await req.allow()                    # or req.allow(updated_input={...}), req.always_allow(),
                                                 # req.deny(message="use the staging db"), req.deny(interrupt=True)

An answer is an ``approval_answer`` on the session's ingress: ingestion checks it against the parked
approval (a wrong id, session or tool_use_id is dead-lettered) and resolves the approval once; a second
answer is ignored (H4.4). ``deny`` builds the model-visible text of H6.3 (REJECT_MESSAGE, or
REJECT_MESSAGE_WITH_REASON_PREFIX + the message; the SUBAGENT_* texts when a sub-agent asked).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from dataclasses import dataclass
from functools import partial
from typing import TYPE_CHECKING, Any

from agentbus_redis.approvals.records import ApprovalAnswer, ApprovalRequest, rejection_text
from agentbus_redis.json_types import JsonObject, JsonValue
from agentbus_redis.stores.approvals import ApprovalStore, StoredApproval

if TYPE_CHECKING:
    from agentbus_redis.sdk.client import AgentbusClient


def answer_key(approval_id: str) -> str:
    """One idempotency key per approval: a retried (or second) answer is applied at most once."""
    return f"approval_answer:{approval_id}"


@dataclass(frozen=True, slots=True)
class PendingApproval:
    """An approval request (H4.2) and the calls that answer it."""

    request: ApprovalRequest
    bus: AgentbusClient

    @property
    def approval_id(self) -> str:
        return self.request.approval_id

    @property
    def session_id(self) -> str:
        return self.request.session_id

    @property
    def tool_name(self) -> str:
        return self.request.tool_name

    @property
    def input(self) -> JsonValue:
        return self.request.input

    async def allow(
        self,
        updated_input: JsonObject | None = None,
        *,
        updated_permissions: list[JsonObject] | None = None,
        message: str | None = None,
        answered_by: str | None = None,
    ) -> str:
        """Run the tool (with ``updated_input`` instead of the model's, H4.3); ``updated_permissions``
        (H1.4 updates) join the session's rules first (H7); ``message`` is feedback the model reads after
        the result (H5.3). Returns the ingress entry id."""
        return await self._answer(
            behavior="allow",
            updated_input=updated_input,
            updated_permissions=updated_permissions or [],
            message=message,
            answered_by=answered_by,
        )

    async def always_allow(self, updated_input: JsonObject | None = None, *, answered_by: str | None = None) -> str:
        """Allow, and add the request's permission suggestions to the session (H7.3 "Yes, and don't ask
        again"): later identical calls of the session run without asking."""
        return await self.allow(
            updated_input, updated_permissions=list(self.request.permission_suggestions), answered_by=answered_by
        )

    async def deny(self, message: str | None = None, *, interrupt: bool = False, answered_by: str | None = None) -> str:
        """The model gets H6.3's rejection text (with ``message`` as the user's words); ``interrupt`` also
        aborts the turn (H6.2)."""
        text = rejection_text(message, is_subagent=self.request.agent_id is not None)
        return await self._answer(behavior="deny", message=text, interrupt=interrupt, answered_by=answered_by)

    async def _answer(self, **fields: Any) -> str:
        payload = ApprovalAnswer(approval_id=self.approval_id, tool_use_id=self.request.tool_use_id, **fields)
        return await self.bus.publish(self.session_id, payload, idempotency_key=answer_key(self.approval_id))


async def follow_approvals(
    bus: AgentbusClient, session_id: str | None = None, *, block_ms: int = 1000
) -> AsyncIterator[PendingApproval]:
    """Yield every pending approval (of one session and its sub-agents' child sessions, or all), then each new
    one as it is requested. Never ends by itself: ``break``, or bound it with ``asyncio.timeout``."""
    store = ApprovalStore(bus.redis, bus.topology)
    stream = store.events_stream
    last: Any = await bus.ride(lambda: bus.redis.xrevrange(stream, count=1), f"read {stream}")
    cursor: bytes | str = last[0][0] if last else "0-0"
    seen: set[str] = set()
    for request in await bus.ride(lambda: store.pending(session_id), "read the pending approvals"):
        seen.add(request.approval_id)
        yield PendingApproval(request, bus)
    while True:
        rows: Any = await bus.ride(
            partial(bus.redis.xread, {stream: cursor}, block=block_ms, count=100), f"follow {stream}"
        )
        for _, entries in rows:
            for entry_id, fields in entries:
                cursor = entry_id
                if fields.get(b"event") != b"requested":
                    continue
                approval_id, owner = fields[b"approval_id"].decode(), fields[b"session_id"].decode()
                if approval_id in seen:
                    continue
                stored = await bus.ride(partial(store.get, owner, approval_id), f"read approval {approval_id}")
                mine = session_id is None or (
                    stored is not None and session_id in (owner, stored.request.parent_session_id)
                )
                if stored is not None and stored.pending and mine:
                    seen.add(approval_id)
                    yield PendingApproval(stored.request, bus)


async def find_approval(bus: AgentbusClient, approval_id: str) -> StoredApproval | None:
    return await ApprovalStore(bus.redis, bus.topology).find(approval_id)
