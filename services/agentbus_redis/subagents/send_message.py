"""``SendMessage`` (A4.4) as a tool worker runs it: continue an ended child of the calling session.

The child's history is its own session on the bus, so the message is simply the child's next prompt. The
child's record is restarted for the round first (this call, new times, the prompt's uuid: the round's
result is built from that prompt on, agents/turn.py), then the prompt is sent; a relay or sweep
that looks in between finds the round's prompt not logged yet and waits. A foreground child answers this
call when its turn ends (A5, ``relay.py``); a background one is answered now and notifies later (A5.4).
A job re-run after a crash finds the record already restarted by this call and only sends the prompt
again (a duplicate key if it was sent).
"""

from __future__ import annotations

import uuid as uuid_module
from collections.abc import AsyncIterator

import structlog

from agentbus_redis.agents.ids import AGENT_ID_PATTERN, parse_child_session
from agentbus_redis.agents.limits import background_deadline_ms, child_deadline_ms, fan_out_problem
from agentbus_redis.agents.record import ChildRecord
from agentbus_redis.agents.send_message import (
    SEND_MESSAGE_TOOL_NAME,
    SendMessageInput,
    continued_in_background_text,
    not_a_child,
    send_message_tool_definition,
    still_running,
    unknown_agent,
)
from agentbus_redis.bus.events import IngressEnvelope, UserPrompt
from agentbus_redis.runtime.codec import signed_entry_fields
from agentbus_redis.subagents.launcher import CURRENT_AGENT_JOB, AgentTool, CallingJob
from agentbus_redis.tools.definitions import ToolDefinition
from agentbus_redis.tools.tool import Tool, ToolContext, ToolError, ToolOutput, ToolProgress

log = structlog.get_logger(__name__)

_ROUND_NAMESPACE = uuid_module.UUID("9a3d2c1e-7b4f-4e6a-b5d8-2f0c9e8a7b61")


class SendMessageTool(Tool[SendMessageInput]):
    """A4.4: ``SendMessage {to, message}``; concurrency-safe (each call continues its own child)."""

    name = SEND_MESSAGE_TOOL_NAME
    input_model = SendMessageInput

    def __init__(self, agents: AgentTool) -> None:
        self.agents = agents
        self.store = agents.store

    def definition(self) -> ToolDefinition:
        return send_message_tool_definition()

    def is_read_only(self, tool_input: SendMessageInput) -> bool:
        return True

    def is_concurrency_safe(self, tool_input: SendMessageInput) -> bool:
        return True

    async def call(self, tool_input: SendMessageInput, ctx: ToolContext) -> AsyncIterator[ToolProgress | ToolOutput]:
        agent_job = CURRENT_AGENT_JOB.get()
        if agent_job is None:
            raise ToolError("The SendMessage tool runs only inside a tool worker's job")
        record = await self._continue(agent_job.job, ctx.tool_use_id, tool_input)
        log.info(
            "agent_continued",
            parent_session_id=record.parent_session_id,
            child_session_id=record.session_id,
            agent_id=record.agent_id,
            background=record.background,
        )
        if not record.background:
            agent_job.launched.add(ctx.tool_use_id)  # answered when the child's turn ends (relay.py)
            yield ToolOutput(content="")
            return
        output_file = record.output_file or ""
        self.agents.outputs.follow(record.session_id, output_file, round_call=record.parent_tool_use_id)
        yield ToolOutput(
            content=continued_in_background_text(record.agent_id, output_file=output_file),
            tool_use_result={"status": "async_launched", "agentId": record.agent_id, "outputFile": output_file},
        )

    async def _child_of(self, session_id: str, agent_id: str) -> str:
        """The child session ``agent_id`` names, if the calling session started it; else the typed error."""
        child = await self.store.find(agent_id) if AGENT_ID_PATTERN.fullmatch(agent_id) else None
        if child is None:
            raise ToolError(unknown_agent(agent_id))
        parsed = parse_child_session(child)
        if parsed is None or parsed.parent_session_id != session_id:
            raise ToolError(not_a_child(agent_id))
        return child

    async def _continue(self, calling: CallingJob, tool_use_id: str, tool_input: SendMessageInput) -> ChildRecord:
        child = await self._child_of(calling.session_id, tool_input.to)
        found = await self.store.record(child)
        if found is None:
            raise ToolError(unknown_agent(tool_input.to))
        record, status = found
        if record.parent_tool_use_id == tool_use_id:
            await self._send(record, tool_input.message)  # a re-run of this job: the round was started
            return record
        if status == "running":
            raise ToolError(still_running(tool_input.to))
        limits = self.agents.setup.limits
        now = self.agents.now_ms()
        deadline = (
            background_deadline_ms(started_ms=now, limits=limits)
            if record.background
            else child_deadline_ms(started_ms=now, call_deadline_ms=calling.deadline_ms, limits=limits)
        )
        restarted = record.model_copy(
            update={
                "parent_tool_use_id": tool_use_id,
                "parent_assistant_uuid": calling.assistant_uuid,
                "parent_message_id": calling.message_id,
                "prompt": tool_input.message,
                "dispatched_ms": calling.dispatched_ms,
                "started_ms": now,
                "deadline_ms": deadline,
                "round_prompt_uuid": str(uuid_module.uuid5(_ROUND_NAMESPACE, f"{child}\0{tool_use_id}")),
            }
        )
        running = await self.store.reserve(restarted, limits.max_children)
        if (problem := fan_out_problem(running, limits)) is not None:
            await self.store.release(restarted.parent_session_id, child)
            raise ToolError(problem)
        await self.store.restart(restarted)
        await self._send(restarted, tool_input.message)
        return restarted

    async def _send(self, record: ChildRecord, message: str) -> None:
        """The child's next prompt (A4.4), with the round's uuid; one per call however often it is sent."""
        prompt = IngressEnvelope(
            session_id=record.session_id,
            idempotency_key=f"agent_message:{record.parent_tool_use_id}",
            payload=UserPrompt(content=message, uuid=record.round_prompt_uuid),
        )
        fields = signed_entry_fields(prompt, self.agents.internal_key)
        await self.agents.redis.xadd(self.agents.topology.ingress_for(record.session_id), fields)  # type: ignore[arg-type]
