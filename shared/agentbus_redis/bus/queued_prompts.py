"""Queued prompts: a user prompt that waits for the session's turn to be over (agent-loop.md A5.4: a
background agent's ``<task-notification>`` is "a queued user message the parent sees on its next turn").

A prompt sent with ``queued: true`` is logged at once when the session is idle — which starts its next model
turn, as any prompt does — and otherwise held by the ledger until the turn ends: a reply that asks for no
tool (or an API error message), or the interruption text. A plain prompt that arrives meanwhile takes the
held ones along (logged just before it), so the model sees them in the same request. Holding instead of
logging keeps the one-call-per-session rule: a prompt logged while the model is answering would publish a
second request built without that answer.
"""

from __future__ import annotations

from agentbus_redis.agents.turn import ends_reply, is_interruption
from agentbus_redis.messages.kinds import AssistantMessage, Message, UserMessage


def turn_open_after(message: Message, *, was_open: bool) -> bool:
    """Whether the session's turn is open after ``message`` is logged: a prompt or a tool result opens it
    (the model is due), a reply that ends the turn or the interruption text closes it; meta user messages
    and everything else leave it as it was."""
    if isinstance(message, AssistantMessage):
        return not ends_reply(message)
    if isinstance(message, UserMessage):
        if is_interruption(message):
            return False
        if message.is_meta:
            return was_open
        return True
    return was_open
