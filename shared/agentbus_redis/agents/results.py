"""A5 what the parent receives when a child ends, and A8/A9 the results of a stopped child.

Every function returns a :class:`ParentResult`: the ``tool_result`` content the model reads, whether it is
an error, and the ``toolUseResult`` stored beside it in the parent's transcript (A5.1). Texts marked
"agentbus" are ours (Claude Code has no equivalent); the others are byte-exact.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from agentbus_redis.agents.definitions import ONE_SHOT_BUILTINS
from agentbus_redis.agents.tool import AGENT_RESULT_SIZE_LIMIT
from agentbus_redis.json_types import JsonObject, JsonValue
from agentbus_redis.messages.constants import (
    REJECT_MESSAGE,
    USER_REJECTED_TOOL_USE,
    tool_use_error,
    with_memory_correction_hint,
)
from agentbus_redis.messages.content import ContentBlock, TextBlock, ToolUseBlock
from agentbus_redis.messages.kinds import AssistantMessage, UserMessage

NO_OUTPUT_TEXT = "(Subagent completed but returned no output.)"
"""A5.2, exact."""
NO_ASSISTANT_MESSAGES = "No assistant messages found"
"""A5.5, exact."""


@dataclass(frozen=True, slots=True)
class ParentResult:
    """The ``tool_result`` of the parent's Agent call."""

    content: str | list[ContentBlock]
    is_error: bool
    tool_use_result: JsonValue


@dataclass(frozen=True, slots=True)
class ChildFacts:
    """What the parent's call knows about its child, beside the child's messages."""

    agent_id: str
    agent_type: str
    prompt: str
    description: str
    started_ms: int


def usage_tokens(usage: JsonObject | None) -> int:
    """A5.1 ``totalTokens``: input + cache_creation + cache_read + output of one usage object."""
    if not usage:
        return 0
    total = 0
    for key in ("input_tokens", "cache_creation_input_tokens", "cache_read_input_tokens", "output_tokens"):
        value = usage.get(key)
        if isinstance(value, int) and not isinstance(value, bool):
            total += value
    return total


def cumulative_tokens(messages: Sequence[UserMessage | AssistantMessage]) -> int:
    """A9 (agentbus): every token the child's model calls used — each reply's usage counted once."""
    by_reply: dict[str, int] = {}
    for message in messages:
        if isinstance(message, AssistantMessage) and message.message.usage:
            by_reply[message.api_message_id or message.uuid] = usage_tokens(message.message.usage)
    return sum(by_reply.values())


def _texts(message: AssistantMessage) -> list[TextBlock]:
    return [TextBlock(type="text", text=block.text) for block in message.blocks if isinstance(block, TextBlock)]


def _final_texts(assistants: Sequence[AssistantMessage]) -> list[TextBlock]:
    """A5.1 ``content``: the text blocks of the last assistant message, else of the most recent one that
    has text."""
    for message in reversed(assistants):
        texts = _texts(message)
        if texts:
            return texts
    return []


def cut_note(total: int, limit: int) -> str:
    """What a cut result says (agentbus text): the original size and what was kept. Claude Code persists a
    result over a tool's size limit to a file under ``<session>/tool-results/`` (R7.1 [SEC]); the spec
    gives neither that file's name nor the text that replaces the result, so the result is cut instead."""
    return f"[agentbus: output cut: {total} characters, the first {limit} kept]"


def _cut(texts: list[TextBlock], limit: int) -> list[TextBlock]:
    """A1.1 result size limit: text beyond ``limit`` characters is cut, and the cut says how large the
    output was (:func:`cut_note`)."""
    total = sum(len(block.text) for block in texts)
    if total <= limit:
        return texts
    kept: list[TextBlock] = []
    room = limit
    for block in texts:
        if room <= 0:
            break
        kept.append(TextBlock(type="text", text=block.text[:room]))
        room -= len(block.text)
    last = kept[-1]
    kept[-1] = TextBlock(type="text", text=f"{last.text}\n\n{cut_note(total, limit)}")
    return kept


def usage_trailer(agent_id: str, *, total_tokens: int, tool_uses: int, duration_ms: int) -> str:
    """A5.2, exact: the agentId line and the usage block (no worktree: we keep none)."""
    return (
        f"agentId: {agent_id} (use SendMessage with to: '{agent_id}' to continue this agent)\n"
        f"<usage>total_tokens: {total_tokens}\ntool_uses: {tool_uses}\nduration_ms: {duration_ms}</usage>"
    )


def completed_result(
    facts: ChildFacts, messages: Sequence[UserMessage | AssistantMessage], *, now_ms: int
) -> ParentResult:
    """A5.1/A5.2 a child whose turn ended (A3.9: its API error text ends it too)."""
    assistants = [message for message in messages if isinstance(message, AssistantMessage)]
    if not assistants:
        return error_result(NO_ASSISTANT_MESSAGES)
    last = assistants[-1]
    texts = _cut(_final_texts(assistants), AGENT_RESULT_SIZE_LIMIT)
    tool_uses = sum(1 for message in assistants for block in message.blocks if isinstance(block, ToolUseBlock))
    duration_ms = max(0, now_ms - facts.started_ms)
    usage = last.message.usage or {}
    total_tokens = usage_tokens(usage)
    content: list[ContentBlock] = list(texts) if texts else [TextBlock(type="text", text=NO_OUTPUT_TEXT)]
    if facts.agent_type not in ONE_SHOT_BUILTINS:
        trailer = usage_trailer(facts.agent_id, total_tokens=total_tokens, tool_uses=tool_uses, duration_ms=duration_ms)
        content.append(TextBlock(type="text", text=trailer))
    data: JsonObject = {
        "status": "completed",
        "prompt": facts.prompt,
        "agentId": facts.agent_id,
        "agentType": facts.agent_type,
        "content": [block.to_wire() for block in texts],
        "totalToolUseCount": tool_uses,
        "totalDurationMs": duration_ms,
        "totalTokens": total_tokens,
        "usage": usage,
    }
    return ParentResult(content=content, is_error=False, tool_use_result=data)


def interrupted_result() -> ParentResult:
    """A8.2 (streaming executor): REJECT_MESSAGE, toolUseResult ``User rejected tool use``."""
    return ParentResult(
        content=with_memory_correction_hint(REJECT_MESSAGE), is_error=True, tool_use_result=USER_REJECTED_TOOL_USE
    )


def error_result(message: str) -> ParentResult:
    """R8.1 (the formatted error of a failing call): ``<tool_use_error>MSG</tool_use_error>``,
    toolUseResult ``Error: MSG``."""
    return ParentResult(content=tool_use_error(message), is_error=True, tool_use_result=f"Error: {message}")


def wall_time_exceeded(facts: ChildFacts, limit_s: float) -> ParentResult:
    """A9 (agentbus text)."""
    return error_result(
        f'Agent "{facts.description}" (agentId: {facts.agent_id}) exceeded its wall-time limit of {limit_s:g}s '
        "and was stopped"
    )


def tokens_exceeded(facts: ChildFacts, limit: int, used: int) -> ParentResult:
    """A9 (agentbus text)."""
    return error_result(
        f'Agent "{facts.description}" (agentId: {facts.agent_id}) exceeded its token limit of {limit} tokens '
        f"(used {used}) and was stopped"
    )
