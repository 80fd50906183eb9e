"""The model's side of a conversation, played through the SDK in a test: wait for the normalizer's next API
request, then answer it (a streamed reply as raw Anthropic events, or a whole message), as a model worker
does. Used where the test must control exactly when each event arrives."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass

from agentbus_redis.cli.local.demo import stream_events_for
from agentbus_redis.json_types import JsonObject
from agentbus_redis.messages.content import ContentBlock
from agentbus_redis.messages.kinds import AssistantMessage
from agentbus_redis.sdk.client import AgentbusClient

Reply = Callable[[AgentbusClient, str], Awaitable[None]]
"""Answers one request of a session."""


def streamed(blocks: Sequence[ContentBlock], *, stop_reason: str | None = None) -> Reply:
    """A reply streamed as the events a model sends for ``blocks`` (``stop_reason`` overrides the natural one)."""

    async def reply(bus: AgentbusClient, session: str) -> None:
        request_id = request_id_of(session)
        for event in reply_events(blocks, stop_reason=stop_reason):
            await bus.send_stream_event(session, request_id, event)

    return reply


def reply_events(blocks: Sequence[ContentBlock], *, stop_reason: str | None = None) -> list[JsonObject]:
    events = stream_events_for(list(blocks), message_id=f"msg_{uuid.uuid4().hex[:12]}", model="claude-test")
    if stop_reason is not None:
        delta = events[-2]["delta"]
        assert isinstance(delta, dict)
        delta["stop_reason"] = stop_reason
    return events


def delta_text(event: JsonObject) -> str:
    """The text of a ``content_block_delta`` event's ``text_delta``."""
    delta = event["delta"]
    assert isinstance(delta, dict)
    text = delta["text"]
    assert isinstance(text, str)
    return text


def request_id_of(session: str) -> str:
    """A request id per reply (each model call has its own)."""
    return f"req_{session}_{uuid.uuid4().hex[:8]}"


def whole(message: AssistantMessage) -> Reply:
    async def reply(bus: AgentbusClient, session: str) -> None:
        await bus.send_assistant(session, message)

    return reply


@dataclass
class ModelSide:
    """Answers the session's requests with ``replies``, one per request, from the request after ``after_seq``."""

    bus: AgentbusClient
    session: str
    replies: list[Reply]
    after_seq: int = 0
    timeout_s: float = 60.0

    @classmethod
    async def start(cls, bus: AgentbusClient, session: str, replies: list[Reply]) -> asyncio.Task[None]:
        """Start answering the requests published after now (call before the prompt is sent)."""
        before = await bus.latest_request(session)
        side = cls(bus, session, replies, before.seq if before else 0)
        return asyncio.ensure_future(side.run())

    async def run(self) -> None:
        seq = self.after_seq
        for reply in self.replies:
            request = await self.bus.next_request(self.session, after_seq=seq, timeout_s=self.timeout_s)
            seq = request.seq
            await reply(self.bus, self.session)
