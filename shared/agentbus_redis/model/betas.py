"""Which ``anthropic-beta`` names a Messages API request needs (agent-loop.md M1.1, ``betas``).

A request the normalizer builds from a Claude Code 2.1.332 history holds ``role: "system"`` messages in
``messages`` (``normalize/attachments/rendered.py``), a shape only the beta Messages API takes (the anthropic SDK's
``BetaSystemMessageParam``). Claude Code 2.1.332 sends every such request to ``/v1/messages?beta=true``
naming, beside the betas of its own features (thinking, context management …), these two (seen on the
wire against the compat capture server, and in its code as ``per_message_effort`` and
``mid_conv_tool_change``, both decided per model, so named whether or not this request uses them):

- ``per-turn-control-2026-07-01``: ``output_config`` on a system message (the turn's effort);
- ``mid-conversation-tool-changes-2026-07-01``: ``tool_addition`` / ``tool_removal`` blocks in one.

The system-role message itself needs no name: the client's ``mid_conversation_system`` beta has none
("generally available; the header is not sent"). A system message carrying ``clear_at`` is sent with
``mid-conversation-system-clear-at-2026-08-21`` as well (the client adds it with its ``clear_at``
reminders and drops both together when the API refuses them).

The anthropic SDK 2.13 lists ``mid-conversation-output-config-2026-07-01`` for per-message output config;
the client sends ``per-turn-control-2026-07-01``, and where they disagree the client wins.

A request without system-role messages needs no beta: it goes to the plain Messages API as before. (The
Python SDK's beta API sends the same path, ``/v1/messages``, without the JS client's ``?beta=true``.)
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Final

from agentbus_redis.json_types import JsonValue

PER_TURN_CONTROL: Final = "per-turn-control-2026-07-01"
MID_CONVERSATION_TOOL_CHANGES: Final = "mid-conversation-tool-changes-2026-07-01"
MID_CONVERSATION_SYSTEM_CLEAR_AT: Final = "mid-conversation-system-clear-at-2026-08-21"

SYSTEM_MESSAGE_BETAS: Final = (PER_TURN_CONTROL, MID_CONVERSATION_TOOL_CHANGES)
"""What Claude Code 2.1.332 names for a request holding system-role messages, in its order."""


def required_betas(body: Mapping[str, JsonValue]) -> list[str]:
    """The beta names the request ``body`` (the JSON body as sent) needs, in Claude Code's order; empty
    for a request the plain Messages API takes."""
    messages = body.get("messages")
    system_messages = [
        message
        for message in (messages if isinstance(messages, list) else [])
        if isinstance(message, Mapping) and message.get("role") == "system"
    ]
    if not system_messages:
        return []
    betas = list(SYSTEM_MESSAGE_BETAS)
    if any("clear_at" in message for message in system_messages):
        betas.append(MID_CONVERSATION_SYSTEM_CLEAR_AT)
    return betas


__all__ = [
    "MID_CONVERSATION_SYSTEM_CLEAR_AT",
    "MID_CONVERSATION_TOOL_CHANGES",
    "PER_TURN_CONTROL",
    "SYSTEM_MESSAGE_BETAS",
    "required_betas",
]
