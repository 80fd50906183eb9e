"""The tool worker's side of human approval (agent-loop.md §H; the flow is in approvals/records.py).

:meth:`ApprovalGate.plan` runs before a job's calls go to the executor:

* a job's calls that ask (H2, ``AGENTBUS_TOOLS__ASK_POLICY=approve``) are parked rather than run: R8.5
  runs consecutive concurrency-safe calls together and every other call alone, batch after batch, so the
  batch holding the first asking call runs its other calls now and its asking calls wait; the calls of
  every later batch (the tail) wait behind them — a later batch never starts before an earlier one
  ended, as in Claude Code where the next batch waits for the permission dialog. Earlier batches run now.
  The park is announced to ingestion (a signed ``approval_requested``), stored for people, and the job
  ends: no slot is held while a person thinks.
* a continuation job (written and signed by ingestion) carries a decision: allowed → the session's new
  rules are stored first (H7.4), then the call runs with the approved (maybe updated, H4.3) input —
  claimed once in the store, so a redelivered continuation never runs the tool again (it answers with the
  placeholder instead: the first attempt may have run it); denied, timed out or cancelled → the decision's
  text is the tool_result (H4.4, H5.1); a park's tail runs like a job of its own.
* a job re-run after a crash leaves calls that another park holds to that park.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace

import redis.asyncio as aioredis
import structlog
from pydantic import ValidationError

from agentbus_redis.approvals.records import (
    ApprovalContinuation,
    ApprovalRequest,
    ApprovalRequested,
    AskedCall,
    approval_id_for,
    park_id_for,
    permission_suggestions,
    with_session_permissions,
)
from agentbus_redis.bus.events import IngressEnvelope, ToolJob, parse_tool_job
from agentbus_redis.bus.internal_events import AUTH_FIELD, FORGED_INTERNAL_EVENT, is_authentic
from agentbus_redis.bus.ledger import tool_result_ids_of
from agentbus_redis.clock import Clock, epoch_ms, utc_now
from agentbus_redis.ids import IdSource, random_uuid
from agentbus_redis.messages.content import TextBlock, ToolUseBlock
from agentbus_redis.messages.kinds import ProgressMessage, UserMessage
from agentbus_redis.model.session_config import SessionModelConfig
from agentbus_redis.observability.approval_metrics import (
    record_approval_decision,
    record_approval_requested,
    set_approvals_pending,
)
from agentbus_redis.observability.metrics import record_tool_execution
from agentbus_redis.permissions.checks import path_inputs
from agentbus_redis.permissions.decide import PermissionContext, decide
from agentbus_redis.permissions.path_glob import is_within
from agentbus_redis.permissions.rules import EDIT_RULE_TOOLS, READ_RULE_TOOLS
from agentbus_redis.permissions.types import PermissionDecision
from agentbus_redis.runtime.codec import DATA_FIELD, decode_entry, signed_entry_fields
from agentbus_redis.runtime.consumer import Poison
from agentbus_redis.stores.approvals import ApprovalStore, fold_permission_updates
from agentbus_redis.streams.entries import StreamEntry
from agentbus_redis.streams.topology import Topology
from agentbus_redis.tools.tool import ToolContext
from agentbus_redis.workers.tools import results
from agentbus_redis.workers.tools.executor import plan_batches
from agentbus_redis.workers.tools.registry import ToolRegistry

log = structlog.get_logger(__name__)

AnyJob = ToolJob | ApprovalContinuation


def carries_decision(job: AnyJob) -> bool:
    """A continuation with a person's (or the deadline's, or an interrupt's) decision for one call."""
    return isinstance(job, ApprovalContinuation) and job.approval_id is not None


@dataclass(frozen=True, slots=True)
class JobPlan:
    """What the worker does with a job's unanswered calls: ``answered`` results to publish as they are,
    the calls to ``run`` with ``permissions``, and feedback to append to an allowed call's result (H5.3)."""

    run: list[ToolUseBlock]
    permissions: PermissionContext
    answered: list[UserMessage] = field(default_factory=list)
    feedback: dict[str, str] = field(default_factory=dict)

    def decorate(self, message: ProgressMessage | UserMessage) -> ProgressMessage | UserMessage:
        """H5.3: an allowed call's feedback is a text block after its tool_result, in the same message."""
        if not self.feedback or not isinstance(message, UserMessage):
            return message
        notes = [self.feedback[i] for i in tool_result_ids_of(message) if i in self.feedback]
        if not notes:
            return message
        content = [*message.blocks, *(TextBlock(text=note) for note in notes)]
        return message.model_copy(update={"message": message.message.model_copy(update={"content": content})})


@dataclass(frozen=True, slots=True)
class _Session:
    permissions: PermissionContext
    parked: dict[str, str]
    config: SessionModelConfig | None


class ApprovalGate:
    """Parks asking calls and carries out decisions (see the module docstring)."""

    def __init__(
        self,
        redis: aioredis.Redis,
        topology: Topology,
        *,
        registry: ToolRegistry,
        internal_key: bytes,
        consumer: str,
        timeout_s: float,
        clock: Clock = utc_now,
        ids: IdSource = random_uuid,
        now_ms: Callable[[], int] = epoch_ms,
    ) -> None:
        self.redis = redis
        self.topology = topology
        self.store = ApprovalStore(redis, topology)
        self.registry = registry
        self.internal_key = internal_key
        self.consumer = consumer
        self.timeout_s = timeout_s
        self.clock = clock
        self.ids = ids
        self.now_ms = now_ms

    # -- decoding --------------------------------------------------------------------------------

    def decode(self, entry: StreamEntry) -> AnyJob | Poison:
        """A tool job, or a continuation — which must carry ingestion's authenticator: it runs a call
        without asking, so a producer that could write the jobs stream must not be able to make one."""
        job = decode_entry(entry, parse_tool_job)
        raw = entry.fields.get(DATA_FIELD)
        if not isinstance(job, Poison) or raw is None or b'"approval_continuation"' not in raw:
            return job
        continuation = decode_entry(entry, ApprovalContinuation.model_validate_json)
        if isinstance(continuation, Poison):
            return continuation
        if not is_authentic(self.internal_key, raw, entry.fields.get(AUTH_FIELD)):
            detail = f"{entry.stream} {entry.entry_id}: approval_continuation without ingestion's authenticator"
            return Poison(FORGED_INTERNAL_EVENT, detail)
        return continuation

    # -- planning --------------------------------------------------------------------------------

    async def plan(
        self,
        job: AnyJob,
        calls: Sequence[ToolUseBlock],
        permissions: PermissionContext,
        *,
        interrupted: bool,
        registry: ToolRegistry | None = None,
    ) -> JobPlan:
        """``registry``: the session's tools (confined to its workspace), when not the gate's own."""
        tools = registry or self.registry
        if isinstance(job, ToolJob) and permissions.ask_policy != "approve":
            return JobPlan(list(calls), permissions)  # no parks, no session rules: no round trip
        session = await self._session(job.session_id, [call.id for call in calls], permissions)
        if isinstance(job, ApprovalContinuation) and job.approval_id is not None:
            return await self._decided(job, calls, session, permissions)
        own_park = job.park_id if isinstance(job, ApprovalContinuation) else None
        mine = [call for call in calls if session.parked.get(call.id, own_park) == own_park]
        if session.permissions.ask_policy != "approve" or interrupted or not mine:
            return JobPlan(mine, session.permissions)
        asks = {call.id: d for call in mine if (d := await self._asks(call, session.permissions, tools)) is not None}
        if not asks:
            return JobPlan(mine, session.permissions)
        batches = plan_batches(mine, tools)
        index = next(i for i, batch in enumerate(batches) if any(call.id in asks for call in batch))
        run = [call for batch in batches[:index] for call in batch]
        run += [call for call in batches[index] if call.id not in asks]
        asked = [call for call in batches[index] if call.id in asks]
        tail = [call for batch in batches[index + 1 :] for call in batch]
        await self._park(job, asked, asks, tail, session)
        return JobPlan(run, session.permissions)

    async def _session(self, session_id: str, call_ids: list[str], base: PermissionContext) -> _Session:
        pipe = self.redis.pipeline(transaction=False)
        pipe.lrange(self.store.updates_key(session_id), 0, -1)
        pipe.hmget(self.store.parked_key(session_id), call_ids or ["-"])
        pipe.get(self.topology.session_config(session_id))
        updates, parked_values, raw_config = await pipe.execute()
        rules = fold_permission_updates(updates)
        config = None
        if raw_config:
            try:
                config = SessionModelConfig.model_validate_json(raw_config)
            except ValidationError:
                log.warning("session_config_invalid", session_id=session_id)
        context = with_session_permissions(base, rules)
        if config is not None and config.agent_id is not None:
            context = replace(context, is_subagent=True)
        parked = {i: v.decode() for i, v in zip(call_ids, parked_values, strict=False) if v is not None}
        return _Session(context, parked, config)

    async def _asks(
        self, call: ToolUseBlock, context: PermissionContext, registry: ToolRegistry
    ) -> PermissionDecision | None:
        """The "ask" decision the executor would meet for ``call`` (None: it would not ask — allowed,
        denied, or an input error the executor reports)."""
        tool = registry.get(call.name)
        if tool is None or not isinstance(call.input, dict):
            return None
        try:
            parsed = tool.input_model.model_validate(call.input)
            await tool.validate_input(parsed, ToolContext(tool_use_id=call.id))
            read_only = bool(tool.is_read_only(parsed))
            extra_paths = tool.permission_paths(parsed)
        except Exception:
            return None
        decision = decide(tool.name, call.input, context, read_only=read_only, extra_paths=extra_paths)
        return decision if decision.behavior == "ask" else None

    # -- parking ---------------------------------------------------------------------------------

    async def _park(
        self,
        job: AnyJob,
        asked: list[ToolUseBlock],
        asks: dict[str, PermissionDecision],
        tail: list[ToolUseBlock],
        session: _Session,
    ) -> None:
        now = self.now_ms()
        deadline = now + int(self.timeout_s * 1000)
        config = session.config
        agent_id = config.agent_id if config is not None else None
        park_id = park_id_for(job.session_id, asked[0].id)
        requests = [self._request(job, call, asks[call.id], session, now, deadline) for call in asked]
        payload = ApprovalRequested(
            park_id=park_id,
            assistant_uuid=job.assistant_uuid,
            message_id=job.message_id,
            dispatched_ms=job.dispatched_ms,
            asked=[
                AskedCall(
                    approval_id=request.approval_id,
                    tool_use=call,
                    deadline_ms=deadline,
                    timeout_s=self.timeout_s,
                    agent_id=agent_id,
                )
                for call, request in zip(asked, requests, strict=True)
            ],
            tail=tail,
        )
        envelope = IngressEnvelope(
            session_id=job.session_id,
            idempotency_key=f"approval_requested:{park_id}",
            payload=payload,
            traceparent=job.traceparent,
        )
        # Ingestion first: an answer a person sends after seeing the stored request must find the park.
        fields = signed_entry_fields(envelope, self.internal_key)
        await self.redis.xadd(self.topology.ingress_for(job.session_id), fields)  # type: ignore[arg-type]
        await self.store.put_park(job.session_id, park_id, requests, [*asks, *(call.id for call in tail)])
        for request in requests:
            record_approval_requested(request.tool_name)
        set_approvals_pending(await self.store.pending_count())
        log.info(
            "tool_calls_parked",
            session_id=job.session_id,
            park_id=park_id,
            asked=[call.name for call in asked],
            tail=len(tail),
        )

    def _request(
        self,
        job: AnyJob,
        call: ToolUseBlock,
        decision: PermissionDecision,
        session: _Session,
        now: int,
        deadline: int,
    ) -> ApprovalRequest:
        context = session.permissions
        blocked = self._blocked_path(call, context)
        message = (
            decision.message or f"Claude requested permissions to use {call.name}, but you haven't granted it yet."
        )
        config = session.config
        return ApprovalRequest(
            approval_id=approval_id_for(job.session_id, call.id),
            session_id=job.session_id,
            agent_id=config.agent_id if config is not None else None,
            parent_session_id=config.parent_session_id if config is not None else None,
            tool_name=call.name,
            input=call.input,
            tool_use_id=call.id,
            permission_suggestions=permission_suggestions(call.name, call.input, decision, blocked_path=blocked),
            blocked_path=blocked,
            decision_reason=None if decision.reason in ("rule", "mode") else message,
            request_message=message,
            assistant_uuid=job.assistant_uuid,
            requested_ms=now,
            deadline_ms=deadline,
        )

    @staticmethod
    def _blocked_path(call: ToolUseBlock, context: PermissionContext) -> str | None:
        """H4.2 ``blocked_path``: the path outside the workspace a file tool's call touches."""
        if (call.name not in READ_RULE_TOOLS and call.name not in EDIT_RULE_TOOLS) or not isinstance(call.input, dict):
            return None
        paths = path_inputs(call.name, call.input, context.workspace_root, context.home_dir)
        return next((path for path in paths if not is_within(path, context.workspace_root)), None)

    # -- decisions -------------------------------------------------------------------------------

    async def _decided(
        self, job: ApprovalContinuation, calls: Sequence[ToolUseBlock], session: _Session, base: PermissionContext
    ) -> JobPlan:
        decision, approval_id = job.decision, job.approval_id
        assert decision is not None
        assert approval_id is not None
        stored = await self.store.resolve(job.session_id, approval_id, decision)
        if stored is not None:
            waited_s = (decision.decided_ms - stored.request.requested_ms) / 1000
            record_approval_decision(stored.request.tool_name, decision.outcome, waited_s)
            log.info("approval_resolved", session_id=job.session_id, approval_id=approval_id, outcome=decision.outcome)
        set_approvals_pending(await self.store.pending_count())
        if not calls:  # answered meanwhile (a placeholder, or a redelivered continuation)
            return JobPlan([], session.permissions)
        call = calls[0]
        answer = results.MessageFactory(job.assistant_uuid, self.clock, self.ids)
        if decision.outcome != "allowed":
            if decision.message is None:
                return JobPlan([], session.permissions)
            record_tool_execution(call.name, "denied")
            return JobPlan([], session.permissions, [answer.result(call, results.permission_denied(decision.message))])
        # H7.4: the session's new rules are stored before the tool runs.
        await self.store.add_permission_updates(job.session_id, approval_id, decision.updated_permissions)
        rules = await self.store.session_permissions(job.session_id)
        context = replace(with_session_permissions(base, rules), is_subagent=session.permissions.is_subagent)
        if not await self.store.claim_run(job.session_id, approval_id, self.consumer):
            record_tool_execution(call.name, "placeholder")
            output = results.started_before()
            log.warning("approved_call_started_before", session_id=job.session_id, approval_id=approval_id)
            return JobPlan([], context, [answer.result(call, output)])
        if decision.updated_input:
            call = call.model_copy(update={"input": decision.updated_input})
        feedback = decision.message.strip() if decision.message else ""
        return JobPlan([call], replace(context, ask_policy="allow"), feedback={call.id: feedback} if feedback else {})

    async def refresh_pending(self) -> None:
        set_approvals_pending(await self.store.pending_count())
