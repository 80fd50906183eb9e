"""Whether a session's turn waits for the model: the rule that tells an interrupt with a request pending
from one while the session is idle (claude-code-messages.md R10.1, R10.6, R2.1c, R2.2c).

Claude Code's query loop writes ``[Request interrupted by user]`` when its abort signal is set while the
model call is under way — and that phase begins before anything streams: the retry loop checks the signal
before every attempt (agent-loop.md M4, M2.9), so an abort while the request waits for a first event, a
retry or a backoff ends the turn the same way (R10.1, zero assistant messages collected). Once the turn is
over (the last reply ended it, an interrupt or an error closed it) no query runs and an abort has nothing
to abort: nothing is written.

On the bus, "the model call is under way" is: the normalizer has a request to publish for the session (a
prompt came, or every call of the latest reply has its result) and no reply to it has begun. The ledger
keeps that as one flag, updated by :func:`model_due_after` for every message it logs and at the two points
where no message says it (a round's last result closed its calls; a stream attempt was retracted).
"""

from __future__ import annotations

from agentbus_redis.messages.constants import SYNTHETIC_MESSAGES
from agentbus_redis.messages.content import TextBlock, ToolResultBlock
from agentbus_redis.messages.kinds import AssistantMessage, Message, UserMessage


def answers_tools(message: UserMessage) -> bool:
    """The user message carries tool results (a tool round's answer, not a prompt)."""
    return any(isinstance(block, ToolResultBlock) for block in message.blocks)


def is_interruption(message: UserMessage) -> bool:
    """R2.1c: an interrupt notice ends the turn; the user types next, the model is not called."""
    blocks = message.blocks
    return bool(blocks) and isinstance(blocks[0], TextBlock) and blocks[0].text in SYNTHETIC_MESSAGES


def model_due_after(message: Message, *, due: bool) -> bool:
    """Whether the model is due once ``message`` is logged (``due``: whether it was before).

    An assistant message is the model's answer (R9: each block its own message), so nothing is pending; an
    interrupt notice closes the turn (R10.1/R10.2); any other user message without tool results — a prompt,
    a meta message such as the output-limit recovery (R10.5) — asks the model. Tool results, progress,
    attachments, system lines and tombstones change nothing by themselves: a round is due only once all of
    its calls are answered, which the ledger knows (its pending calls), not the message."""
    if isinstance(message, AssistantMessage):
        return False
    if isinstance(message, UserMessage) and not answers_tools(message):
        return not is_interruption(message)
    return due


def turn_failed_after(message: Message, *, failed: bool) -> bool:
    """Whether the session's latest turn ended in failure once ``message`` is logged: an API error message
    (M7, ``isApiErrorMessage``) says so, any other reply says the model answered; a prompt starts a new turn that
    has not failed; anything else keeps it."""
    if isinstance(message, AssistantMessage):
        return bool(message.is_api_error_message)
    if isinstance(message, UserMessage) and not answers_tools(message):
        return False
    return failed


__all__ = ["answers_tools", "is_interruption", "model_due_after", "turn_failed_after"]
