"""The ``Agent`` tool (A1) as a tool worker runs it: validate, start the child session, and return
without a result — the slot is free while the child runs; the child's result reaches the parent later
(``relay.py``).

A launch: A1.3 checks (agent type known, not denied by ``Agent(<type>)``), A9 limits (depth, fan-out),
the child's :class:`SessionModelConfig` (A3.3 system prompt, A3.4 tools, A3.5 model, A3.6 thinking off),
its record and the link to its parent, then its first prompt (A3.2: the ``prompt`` string, nothing of
the parent's history) into the child's own ingress shard. Every step is idempotent (the agentId derives
from the call), so a job re-run after a crash starts no second child — and a launch that met a Redis blip
(a restart, a failover, a dropped connection) is run again as a whole until it lands, for up to
``AgentSetup.launch_ride_out_s`` seconds, before the model is told anything (one child per call either way).

The tool learns which job it runs in from :data:`CURRENT_AGENT_JOB`, set by the tool worker around a
job (a context variable: the executor's tasks inherit it).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Protocol

import redis.asyncio as aioredis
import structlog

from agentbus_redis.agents.background import (
    async_launched_data,
    async_launched_text,
    background_tools,
    caller_can_read_output,
    output_file_path,
)
from agentbus_redis.agents.definitions import (
    THINKING_DISABLED,
    AgentCatalog,
    AgentDefinition,
    child_model,
    child_permission_mode,
    child_system_prompt,
    child_tools,
)
from agentbus_redis.agents.ids import agent_id_for, child_session_id, depth_of
from agentbus_redis.agents.limits import (
    AgentLimits,
    background_deadline_ms,
    child_deadline_ms,
    depth_problem,
    fan_out_problem,
)
from agentbus_redis.agents.record import ChildRecord
from agentbus_redis.agents.results import interrupted_result
from agentbus_redis.agents.tool import (
    AGENT_TOOL_NAME,
    BACKGROUND_DISABLED,
    LEGACY_AGENT_TOOL_NAME,
    AgentInput,
    agent_denied,
    agent_not_found,
    agent_tool_definition,
    agent_type_of,
    denied_agent_types,
)
from agentbus_redis.bus.events import IngressEnvelope, UserPrompt
from agentbus_redis.bus.ledger import tool_result_ids_of
from agentbus_redis.clock import epoch_ms
from agentbus_redis.messages.kinds import ProgressMessage, UserMessage
from agentbus_redis.model.session_config import SessionModelConfig
from agentbus_redis.permissions.decide import PermissionContext
from agentbus_redis.runtime.codec import signed_entry_fields
from agentbus_redis.runtime.ride_out import DEFAULT_RIDE_OUT_S, RedisUnavailable, ride_out
from agentbus_redis.streams.topology import Topology
from agentbus_redis.subagents.relay import ChildRelay
from agentbus_redis.subagents.store import AgentStore
from agentbus_redis.subagents.task_output import TaskOutputFiles
from agentbus_redis.tools.definitions import ToolDefinition
from agentbus_redis.tools.tool import Tool, ToolContext, ToolError, ToolOutput, ToolProgress

log = structlog.get_logger(__name__)


class CallingJob(Protocol):
    """What the launch needs of the job an Agent call came in: a :class:`ToolJob`, or an approval
    continuation running the tail of a parked reply (the same fields)."""

    @property
    def session_id(self) -> str: ...
    @property
    def assistant_uuid(self) -> str: ...
    @property
    def message_id(self) -> str | None: ...
    @property
    def dispatched_ms(self) -> int: ...
    @property
    def deadline_ms(self) -> int: ...


@dataclass(slots=True)
class AgentJob:
    """The tool job an Agent call belongs to, and the calls of it that started a child (no result now)."""

    job: CallingJob
    launched: set[str] = field(default_factory=set)

    def deferred(self, message: ProgressMessage | UserMessage) -> bool:
        """True for the executor's placeholder result of a launched call: it is not published."""
        if not isinstance(message, UserMessage):
            return False
        ids = tool_result_ids_of(message)
        return bool(ids) and all(tool_use_id in self.launched for tool_use_id in ids)


CURRENT_AGENT_JOB: ContextVar[AgentJob | None] = ContextVar("agentbus_agent_job", default=None)


def enter_agent_job(job: CallingJob) -> AgentJob:
    """Called by the tool worker at the start of a job (in the job's own task)."""
    agent_job = AgentJob(job)
    CURRENT_AGENT_JOB.set(agent_job)
    return agent_job


@dataclass(frozen=True, slots=True)
class AgentSetup:
    """What the launcher needs besides Redis."""

    catalog: AgentCatalog
    limits: AgentLimits
    model_aliases: dict[str, str]
    cwd: str
    """The tool workers' workspace: the children's cwd (A3.3) and where A5.3 output files live."""
    subagent_model: str | None = None
    background_tasks: bool = True
    """A1.2/A9: ``run_in_background`` is offered (``CLAUDE_CODE_DISABLE_BACKGROUND_TASKS`` turns it off)."""
    launch_ride_out_s: float = DEFAULT_RIDE_OUT_S
    """How long a launch is retried while Redis is unavailable before the call fails (``AGENTBUS_REDIS_RIDE_OUT_S``)."""


class AgentTool(Tool[AgentInput]):
    """A1: ``Agent`` (alias ``Task``); read-only, concurrency-safe, always allowed unless denied by rule."""

    name = AGENT_TOOL_NAME
    aliases = (LEGACY_AGENT_TOOL_NAME,)
    input_model = AgentInput

    def __init__(
        self,
        redis: aioredis.Redis,
        topology: Topology,
        *,
        setup: AgentSetup,
        permissions: PermissionContext,
        internal_key: bytes,
        tool_names: Callable[[], Awaitable[Sequence[str]]],
        now_ms: Callable[[], int] = epoch_ms,
        workspace_for: Callable[[str], str] | None = None,
    ) -> None:
        self.redis = redis
        self.workspace_for = workspace_for
        """A session's workspace (per-session workspaces): a background child's output file goes in its parent's,
        a child is told its own as its cwd. None: every session works in ``setup.cwd``."""
        self.topology = topology
        self.setup = setup
        self.permissions = permissions
        self.internal_key = internal_key
        self.tool_names = tool_names
        """The parent's tool pool when its config names none (every tool some worker runs)."""
        self.now_ms = now_ms
        self.store = AgentStore(redis, topology)
        self.relay = ChildRelay(redis, topology, internal_key=internal_key, now_ms=now_ms)
        self.outputs = TaskOutputFiles(redis, topology)

    def _cwd(self, session_id: str) -> str:
        return self.setup.cwd if self.workspace_for is None else self.workspace_for(session_id)

    def is_read_only(self, tool_input: AgentInput) -> bool:
        return True

    def is_concurrency_safe(self, tool_input: AgentInput) -> bool:
        return True

    def definition(self) -> ToolDefinition:
        """The API tool definition, listing the agent types the model may ask for (A1.1)."""
        return agent_tool_definition(
            self.setup.catalog.visible(denied_agent_types(self.permissions.deny_rules)),
            background=self.setup.background_tasks,
        )

    def _resolve(self, tool_input: AgentInput) -> AgentDefinition:
        """A1.3: the definition asked for, or the exact error."""
        agent_type = agent_type_of(tool_input.subagent_type)
        denied = denied_agent_types(self.permissions.deny_rules)
        if agent_type in denied:
            raise ToolError(agent_denied(agent_type, "settings"))
        definition = self.setup.catalog.get(agent_type)
        if definition is None:
            available = [name for name in self.setup.catalog.names if name not in denied]
            raise ToolError(agent_not_found(agent_type, available))
        return definition

    async def validate_input(self, tool_input: AgentInput, ctx: ToolContext) -> None:
        if tool_input.run_in_background and not self.setup.background_tasks:
            raise ToolError(BACKGROUND_DISABLED)
        self._resolve(tool_input)

    async def call(self, tool_input: AgentInput, ctx: ToolContext) -> AsyncIterator[ToolProgress | ToolOutput]:
        agent_job = CURRENT_AGENT_JOB.get()
        if agent_job is None:
            raise ToolError("The Agent tool runs only inside a tool worker's job")
        try:
            record = await ride_out(
                lambda: self._launch(agent_job.job, ctx.tool_use_id, tool_input),
                bound_s=self.setup.launch_ride_out_s,
                what=f"launch the agent of {ctx.tool_use_id}",
            )
        except RedisUnavailable as error:
            raise ToolError(str(error)) from error
        log.info(
            "agent_launched",
            parent_session_id=record.parent_session_id,
            child_session_id=record.session_id,
            agent_id=record.agent_id,
            agent_type=record.agent_type,
            background=record.background,
        )
        if not record.background:
            agent_job.launched.add(ctx.tool_use_id)  # answered when the child ends (relay.py)
            yield ToolOutput(content="")
            return
        # A5.3: a background launch is answered now; its end is a task notification (A5.4).
        output_file = record.output_file or ""
        self.outputs.follow(record.session_id, output_file, round_call=record.parent_tool_use_id)
        parent_tools = await self.parent_tools(record.parent_session_id)
        yield ToolOutput(
            content=async_launched_text(
                record.agent_id, output_file=output_file, caller_can_read=caller_can_read_output(parent_tools)
            ),
            tool_use_result=async_launched_data(
                record.agent_id, description=record.description, prompt=record.prompt, output_file=output_file
            ),
        )

    async def parent_config(self, parent_session_id: str) -> SessionModelConfig:
        raw = await self.redis.get(self.topology.session_config(parent_session_id))
        return SessionModelConfig.model_validate_json(raw) if raw is not None else SessionModelConfig()

    async def parent_tools(self, parent_session_id: str, parent: SessionModelConfig | None = None) -> list[str]:
        """The parent's tool pool: its config's tools, else every tool some worker runs (A3.4)."""
        if parent is None:
            parent = await self.parent_config(parent_session_id)
        return list(parent.tools) if parent.tools is not None else list(await self.tool_names())

    async def _launch(self, job: CallingJob, tool_use_id: str, tool_input: AgentInput) -> ChildRecord:
        definition = self._resolve(tool_input)
        parent = job.session_id
        limits = self.setup.limits
        parent_depth = depth_of(parent)
        if (problem := depth_problem(parent_depth, limits)) is not None:
            raise ToolError(problem)
        agent_id = agent_id_for(parent, tool_use_id)
        try:
            child = child_session_id(parent, agent_id)
        except ValueError as error:
            raise ToolError(str(error)) from error
        now = self.now_ms()
        background = bool(tool_input.run_in_background)
        deadline = (
            background_deadline_ms(started_ms=now, limits=limits)
            if background
            else child_deadline_ms(started_ms=now, call_deadline_ms=job.deadline_ms, limits=limits)
        )
        record = ChildRecord(
            session_id=child,
            parent_session_id=parent,
            parent_tool_use_id=tool_use_id,
            parent_assistant_uuid=job.assistant_uuid,
            parent_message_id=job.message_id,
            agent_id=agent_id,
            agent_type=definition.name,
            description=tool_input.description,
            prompt=tool_input.prompt,
            dispatched_ms=job.dispatched_ms,
            started_ms=now,
            deadline_ms=deadline,
            max_tokens=limits.max_tokens,
            max_turns=definition.max_turns,
            depth=parent_depth + 1,
            background=background,
            output_file=output_file_path(self._cwd(parent), agent_id) if background else None,
        )
        existing = await self.store.record(child)
        if existing is not None:
            # A re-run of this job (its worker died): the child was registered, perhaps not linked yet, and its
            # prompt may not have been sent yet. Linking again is idempotent; sending again is a duplicate key.
            await self.store.link(existing[0])
            await self._start(existing[0], job)
            return existing[0]
        parent_record = await self.store.record(parent) if parent_depth else None
        parent_mode = (parent_record[0].permission_mode if parent_record else None) or self.permissions.mode
        record = record.model_copy(update={"permission_mode": child_permission_mode(definition, parent_mode)})
        running = await self.store.reserve(record, limits.max_children)
        if (problem := fan_out_problem(running, limits)) is not None:
            await self.store.release(parent, child)
            raise ToolError(problem)
        config = await self._child_config(record, definition, tool_input)
        await self.redis.set(self.topology.session_config(child), config.to_wire_json())
        await self.store.register(record)
        await self._start(record, job)
        return record

    async def _start(self, record: ChildRecord, job: CallingJob) -> None:
        """A3.2: the child's first (and only) prompt; then, if the parent was interrupted while this call
        was being launched, the child is stopped and the call answered at once (A8.2)."""
        prompt = IngressEnvelope(
            session_id=record.session_id,
            idempotency_key=f"agent_prompt:{record.session_id}",
            payload=UserPrompt(content=record.prompt),
        )
        await self.relay.tasks.started(record)  # A6.3, before the child can make progress (a re-run: a duplicate)
        fields = signed_entry_fields(prompt, self.internal_key)
        await self.redis.xadd(self.topology.ingress_for(record.session_id), fields)  # type: ignore[arg-type]
        if record.background:
            return  # A8.3: the parent's interrupt does not reach a background child
        cancelled_at = await self.store.cancelled_at(record.parent_session_id)
        if cancelled_at is not None and cancelled_at >= job.dispatched_ms:
            await self.relay.stop_child(record)
            await self.relay.answer_parent(record, interrupted_result(), "interrupted")

    async def _child_config(
        self, record: ChildRecord, definition: AgentDefinition, tool_input: AgentInput
    ) -> SessionModelConfig:
        parent = await self.parent_config(record.parent_session_id)
        pool = await self.parent_tools(record.parent_session_id, parent)
        tools, invalid = child_tools(definition, pool, allow_nesting=self.setup.limits.allow_nesting)
        if record.background:
            tools = background_tools(tools)  # A3.4: background agents get the restricted set
        if invalid:
            log.warning("agent_tools_invalid", agent_type=definition.name, tools=invalid)
        model = child_model(
            call_model=tool_input.model,
            definition_model=definition.model,
            parent_model=parent.model,
            aliases=self.setup.model_aliases,
            override=self.setup.subagent_model,
        )
        return SessionModelConfig(
            model=model,
            fallback_model=parent.fallback_model,
            system_prompt=child_system_prompt(definition, cwd=self._cwd(record.session_id), model=model, tools=tools),
            tools=tools,
            max_tokens=parent.max_tokens,
            thinking=dict(THINKING_DISABLED),
            tenant=parent.tenant,
            parent_session_id=record.parent_session_id,
            agent_id=record.agent_id,
            agent_type=record.agent_type,
            depth=record.depth,
            max_turns=definition.max_turns,  # A3.8: enforced by the model worker (model/max_turns.py)
            sandbox_network=parent.sandbox_network,  # a child never reaches more than its parent
        )
