"""How the worker closes a streamed reply that ended complete by M2.5 but unterminated (issue 25).

agent-loop.md M2.5: a stream that ended with ``message_start`` and at least one completed block, or with a
stop reason, is a reply, not a failure — Claude Code keeps its finished blocks (a block cut before its
``content_block_stop`` was never yielded, M2.4) and its loop goes on from them: "Loop continues only if any
tool_use block was streamed (stop_reason is not trusted)" (claude-code-messages.md R10.6). A clean cut before
``message_delta`` leaves the reply without a stop reason, and on the bus a reply is closed — its last block
logged, the turn's end seen by every watcher — only by a stop reason and ``message_stop``. The worker adds
what the stream lacks: the ``message_delta`` with the stop reason Claude Code's loop acts on (``tool_use``
when a finished tool_use block was streamed: its tools run and the loop calls again; else ``end_turn``: the
turn ends, ``completed``), then the ``message_stop``. A stream that had its stop reason gets only the stop.
"""

from __future__ import annotations

from agentbus_redis.json_types import JsonObject

MESSAGE_STOP_EVENT: JsonObject = {"type": "message_stop"}


def loop_stop_reason(*, finished_tool_use: bool) -> str:
    """R10.6: the stop reason a reply without one stands for — whether the loop continues (a finished
    tool_use block was streamed) or the turn ends."""
    return "tool_use" if finished_tool_use else "end_turn"


def closing_events(*, stop_reason: str | None, finished_tool_use: bool) -> list[JsonObject]:
    """The events that close a reply complete by M2.5 whose stream ended before ``message_stop``."""
    events: list[JsonObject] = []
    if stop_reason is None:
        reason = loop_stop_reason(finished_tool_use=finished_tool_use)
        # No usage: the stream's last counts stand (M2.6 merges only the fields present).
        events.append({"type": "message_delta", "delta": {"stop_reason": reason, "stop_sequence": None}})
    events.append(dict(MESSAGE_STOP_EVENT))
    return events


__all__ = ["MESSAGE_STOP_EVENT", "closing_events", "loop_stop_reason"]
