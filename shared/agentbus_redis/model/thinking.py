"""The ``thinking`` field of a request (agent-loop.md M1.6, A3.6) and its fit with the messages
(anthropic-api-rules.md §1.10).

Which models think, and which think adaptively, is data (:class:`ThinkingCapabilities`), matched by
substring on the lowercase model id as Claude Code does (``modelSupportsThinking``,
``modelSupportsAdaptiveThinking``, first-party API).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Final

from agentbus_redis.api.request_view import THINKING_TYPES
from agentbus_redis.json_types import JsonObject, JsonValue

MIN_THINKING_BUDGET: Final = 1_024
"""The API's smallest ``budget_tokens``; a smaller budget is a 400."""
DISABLED_THINKING: Final[JsonObject] = {"type": "disabled"}


@dataclass(frozen=True, slots=True)
class ThinkingCapabilities:
    """M1.6 capability lists (substrings of the lowercase model id)."""

    without_thinking: tuple[str, ...] = ("claude-3-",)
    """First-party: every model thinks except the Claude 3 generation (``claude-3-7-sonnet`` included,
    as in Claude Code v2.1.88)."""
    adaptive: tuple[str, ...] = ("opus-4-6", "sonnet-4-6", "opus-4-7", "opus-4-8", "opus-5", "sonnet-5")
    """Adaptive thinking: Claude Code's allowlist (``opus-4-6``, ``sonnet-4-6``) plus the newer models
    the docs name adaptive-only (Opus 4.7) or that Claude Code's rule "4.6+ are trained on adaptive
    thinking" covers. Checked before :attr:`legacy_families`."""
    legacy_families: tuple[str, ...] = ("opus", "sonnet", "haiku")
    """Known families not in :attr:`adaptive` think with a budget; any other model id (Fable, Mythos,
    a future name) gets adaptive thinking, as Claude Code defaults unknown first-party models."""

    without_temperature: tuple[str, ...] = ("opus-4-7",)
    """Models that reject the ``temperature`` field ([3P]: Opus 4.7 does not accept it); M1.6's
    temperature is left out for them (1 is the API default anyway)."""

    def accepts_temperature(self, model: str) -> bool:
        name = model.lower()
        return not any(substring in name for substring in self.without_temperature)

    def supports_thinking(self, model: str) -> bool:
        name = model.lower()
        return not any(substring in name for substring in self.without_thinking)

    def supports_adaptive(self, model: str) -> bool:
        name = model.lower()
        if any(substring in name for substring in self.adaptive):
            return True
        return not any(substring in name for substring in self.legacy_families)


DEFAULT_THINKING_CAPABILITIES = ThinkingCapabilities()


def thinking_is_off(requested: Mapping[str, JsonValue] | None) -> bool:
    """``{"type": "disabled"}`` turns thinking off; ``None`` (the default) leaves it on (Claude Code
    enables thinking unless told otherwise)."""
    return requested is not None and requested.get("type") == "disabled"


def thinking_param(
    model: str,
    requested: Mapping[str, JsonValue] | None,
    *,
    max_tokens: int,
    upper_limit: int,
    capabilities: ThinkingCapabilities = DEFAULT_THINKING_CAPABILITIES,
) -> JsonObject | None:
    """M1.6: the ``thinking`` field to send, or ``None`` to omit it (thinking off).

    ``requested`` is the configured value: ``None`` = on (Claude Code's default), ``{"type":
    "disabled"}`` = off, ``{"type": "enabled", "budget_tokens": n}`` = on with that budget,
    ``{"type": "adaptive"}`` = on. A model that supports adaptive thinking always gets
    ``{"type": "adaptive"}``; any other thinking model ``{"type": "enabled", "budget_tokens":
    min(max_tokens − 1, budget)}`` with budget = the configured one or ``upper_limit − 1``.
    [REC] When that budget falls below the API's minimum (1 024) thinking is omitted instead of
    sending a request the API rejects.
    """
    if thinking_is_off(requested) or not capabilities.supports_thinking(model):
        return None
    if capabilities.supports_adaptive(model):
        return {"type": "adaptive"}
    configured = requested.get("budget_tokens") if requested is not None else None
    budget = configured if isinstance(configured, int) and configured > 0 else upper_limit - 1
    budget = min(max_tokens - 1, budget)
    if budget < MIN_THINKING_BUDGET:
        return None
    return {"type": "enabled", "budget_tokens": budget}


def thinking_budget(thinking: object) -> int | None:
    """The ``budget_tokens`` of an ``enabled`` thinking field (M4.11 needs it); ``None`` otherwise."""
    if isinstance(thinking, Mapping) and thinking.get("type") == "enabled":
        budget = thinking.get("budget_tokens")
        return budget if isinstance(budget, int) else None
    return None


def _blocks(message: JsonValue) -> list[JsonObject]:
    """The well-formed blocks of a raw message (string content reads as one text block, as the API
    reads it)."""
    content = message.get("content") if isinstance(message, dict) else None
    if isinstance(content, str):
        return [{"type": "text", "text": content}] if content else []
    if not isinstance(content, list):
        return []
    return [block for block in content if isinstance(block, dict) and isinstance(block.get("type"), str)]


def _holds(message: JsonValue, block_type: str, id_key: str) -> bool:
    return any(block["type"] == block_type and isinstance(block.get(id_key), str) for block in _blocks(message))


def _is_new_prompt(message: JsonValue) -> bool:
    """A user message carrying no tool_result: where the open assistant turn begins (the same rule as
    :meth:`agentbus_redis.api.request_view.RequestView.open_assistant_turn`)."""
    return (
        isinstance(message, dict)
        and message.get("role") == "user"
        and not _holds(message, "tool_result", "tool_use_id")
    )


def open_turn_assistants(messages: Sequence[JsonValue]) -> list[int]:
    """Indexes of the assistant messages of the turn a request continues: those after the last user
    message that is a new prompt. A light scan of raw dicts from the end — in a long tool loop the
    open turn is most of the request, and this runs for every request."""
    indexes: list[int] = []
    for index in range(len(messages) - 1, -1, -1):
        message = messages[index]
        if _is_new_prompt(message):
            break
        if isinstance(message, dict) and message.get("role") == "assistant":
            indexes.append(index)
    indexes.reverse()
    return indexes


def open_turn_blocks_thinking(messages: Sequence[JsonValue]) -> bool:
    """API §1.10: with thinking on, the assistant turn a request continues (a tool-use loop) must start
    with a thinking block once it holds a tool_use. True when it holds one but does not start with
    thinking — e.g. the normalizer stripped it because its options say thinking is off — so this
    request must go without thinking ("keep one thinking configuration per assistant turn")."""
    turn = open_turn_assistants(messages)
    if not any(_holds(messages[index], "tool_use", "id") for index in turn):
        return False
    first = _blocks(messages[turn[0]])
    return not first or first[0]["type"] not in THINKING_TYPES


def strip_open_turn_thinking(messages: Sequence[JsonValue]) -> list[JsonValue]:
    """API §1.10: with thinking off, no assistant message of the open turn may carry thinking; a copy of
    ``messages`` without those blocks (the input is not changed; untouched messages are shared). A final
    assistant message left empty is dropped (it held only thinking, no tool_use)."""
    return strip_thinking(messages, only=set(open_turn_assistants(messages)))


def _without_thinking(message: JsonValue) -> JsonValue | None:
    """An assistant ``message`` without its thinking blocks: the message itself when it has none,
    ``None`` when nothing else is left."""
    content = message.get("content") if isinstance(message, dict) else None
    if not isinstance(message, dict) or message.get("role") != "assistant" or not isinstance(content, list):
        return message
    kept = [block for block in content if not (isinstance(block, dict) and block.get("type") in THINKING_TYPES)]
    if len(kept) == len(content):
        return message
    return {**message, "content": kept} if kept else None


def strip_thinking(messages: Sequence[JsonValue], *, only: set[int] | None = None) -> list[JsonValue]:
    """A copy of ``messages`` whose assistant messages (those at ``only``, or all) carry no thinking or
    redacted_thinking blocks (M6.6: thinking of another model is never replayed). A message left empty
    is dropped when it is the last one, else kept as it was (it would be invalid either way)."""
    result = list(messages)
    last = len(result) - 1
    drop_last = False
    for index in range(len(result)) if only is None else sorted(only):
        stripped = _without_thinking(result[index])
        if stripped is not None:
            result[index] = stripped
        elif index == last:
            drop_last = True
    return result[:-1] if drop_last else result


__all__ = [
    "DEFAULT_THINKING_CAPABILITIES",
    "DISABLED_THINKING",
    "MIN_THINKING_BUDGET",
    "ThinkingCapabilities",
    "open_turn_assistants",
    "open_turn_blocks_thinking",
    "strip_open_turn_thinking",
    "strip_thinking",
    "thinking_budget",
    "thinking_is_off",
    "thinking_param",
]
