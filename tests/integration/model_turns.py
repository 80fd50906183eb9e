"""Reading a session's log as the model worker tests check it: live messages (tombstones applied), turn
ends, tool-call pairing, and the fake server's script steps."""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from collections.abc import Callable
from typing import Any

import redis.asyncio as aioredis

from agentbus_redis.bus.events import LogEntry
from agentbus_redis.json_types import JsonObject
from agentbus_redis.messages.content import TextBlock, ToolResultBlock, ToolUseBlock
from agentbus_redis.messages.kinds import AssistantMessage, Message, TombstoneMessage, UserMessage
from agentbus_redis.sdk.client import AgentbusClient
from agentbus_redis.streams.topology import Topology


def live_messages(history: list[LogEntry]) -> list[Message]:
    """The log's messages without the tombstoned ones (and without the tombstones)."""
    retracted = {
        getattr(entry.message.message, "uuid", None) for entry in history if isinstance(entry.message, TombstoneMessage)
    }
    return [
        entry.message
        for entry in history
        if not isinstance(entry.message, TombstoneMessage) and getattr(entry.message, "uuid", None) not in retracted
    ]


def tombstones(history: list[LogEntry]) -> list[TombstoneMessage]:
    return [entry.message for entry in history if isinstance(entry.message, TombstoneMessage)]


def text_of(message: Message) -> str:
    if not isinstance(message, AssistantMessage | UserMessage):
        return ""
    return "".join(block.text for block in message.blocks if isinstance(block, TextBlock))


def assert_every_tool_use_answered_once(history: list[LogEntry]) -> None:
    """Never an unpaired tool_use: each live call has exactly one result, and no result answers nothing."""
    live = live_messages(history)
    calls = [b.id for m in live if isinstance(m, AssistantMessage) for b in m.blocks if isinstance(b, ToolUseBlock)]
    results = Counter(
        b.tool_use_id for m in live if isinstance(m, UserMessage) for b in m.blocks if isinstance(b, ToolResultBlock)
    )
    assert len(calls) == len(set(calls)), f"duplicate tool_use ids: {calls}"
    assert {call: results.get(call, 0) for call in calls} == dict.fromkeys(calls, 1), (calls, results)
    assert set(results) <= set(calls), f"results for unknown calls: {set(results) - set(calls)}"


def turn_ended(history: list[LogEntry]) -> bool:
    """The model's turn is over: the last live assistant message ended it (end_turn, or an API error) with
    no call pending, or the turn was interrupted."""
    live = [m for m in live_messages(history) if m.type in ("assistant", "user")]
    if not live:
        return False
    last = live[-1]
    if isinstance(last, UserMessage):
        return text_of(last).startswith("[Request interrupted by user")
    assert isinstance(last, AssistantMessage)
    if last.is_api_error_message:
        return True
    return last.message.stop_reason in ("end_turn", "stop_sequence", "max_tokens") and not any(
        isinstance(b, ToolUseBlock) for b in last.blocks
    )


async def calls_settled(redis: aioredis.Redis, topology: Topology, *sessions: str, timeout_s: float = 60.0) -> None:
    """Wait until no model worker holds the call lease of any of ``sessions``. A call's usage is recorded just
    after its reply's last event is written, and its worker lets the lease go only after that
    (``workers/model/worker.py``): the usage read once a turn ended and this returned counts its every call."""
    deadline = time.monotonic() + timeout_s
    keys = [topology.model_lease(session) for session in sessions]
    while held := [key for key in keys if await redis.exists(key)]:
        if time.monotonic() > deadline:
            raise TimeoutError(f"call leases still held: {held}")
        await asyncio.sleep(0.05)


def ended_with(text: str) -> Callable[[list[LogEntry]], bool]:
    """The turn ended (:func:`turn_ended`) and its last assistant or user message says ``text``: for turns
    whose replies may stop with ``max_tokens`` and go on (M8.5), where :func:`turn_ended` alone fires early."""

    def check(history: list[LogEntry]) -> bool:
        live = [m for m in live_messages(history) if m.type in ("assistant", "user")]
        return turn_ended(history) and bool(live) and text_of(live[-1]) == text

    return check


async def wait_for(
    client: AgentbusClient,
    session: str,
    predicate: Callable[[list[LogEntry]], bool],
    *,
    timeout_s: float = 60.0,
) -> list[LogEntry]:
    deadline = time.monotonic() + timeout_s
    while True:
        history = await client.history(session)
        if predicate(history):
            return history
        if time.monotonic() > deadline:
            lines = [f"{e.seq} {e.message.type} {text_of(e.message)[:80]!r}" for e in history]
            raise TimeoutError(f"session {session}: condition not met; log:\n" + "\n".join(lines))
        await asyncio.sleep(0.05)


def text(value: str) -> JsonObject:
    return {"type": "text", "text": value}


def tool_use(tool_id: str, name: str, **tool_input: Any) -> JsonObject:
    return {"type": "tool_use", "id": tool_id, "name": name, "input": tool_input}


def reply(*content: JsonObject, stop_reason: str | None = None, **options: Any) -> JsonObject:
    stop = stop_reason or ("tool_use" if any(block["type"] == "tool_use" for block in content) else "end_turn")
    return {"kind": "reply", "content": list(content), "stop_reason": stop, **options}


def http_error(status: int, error_type: str, message: str, **headers: str) -> JsonObject:
    named: JsonObject = dict(headers)
    return {"kind": "http_error", "status": status, "error_type": error_type, "message": message, "headers": named}
