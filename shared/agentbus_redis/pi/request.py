"""Requests built from a pi session, by both normalizers side by side.

- :func:`pi_own_request` reproduces what pi itself sends (P4.7: context → ``convertToLlm`` →
  ``transformMessages`` → pi's Anthropic conversion), faithful to the spec including what pi does not
  repair (P6.11, the real 400 of P9.2).
- :func:`claude_code_messages` and the bus build **ours**: the same context and ``convertToLlm``, pi's
  pass 1 for the target model (P5.1: thinking of other providers becomes text, ids fit the API), then the
  P10 mapping into Claude Code messages, which agentbus' own normalizer (§4 with its fixes) turns into a
  request the API accepts. Failed (``error``/``aborted``) turns become synthetic API errors and are dropped
  there, as pi drops them (P5.6 b).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from agentbus_redis.messages.kinds import Message, parse_message
from agentbus_redis.pi.anthropic import ApiObject, convert_messages
from agentbus_redis.pi.claude_code import STASH, ms_to_iso, session_to_claude_code
from agentbus_redis.pi.context import LAST_ENTRY, PiContext, _LastEntry, build_session_context
from agentbus_redis.pi.convert import convert_to_llm
from agentbus_redis.pi.messages import PiAssistantMessage, PiLlmMessage, PiUserMessage
from agentbus_redis.pi.session import PiSession
from agentbus_redis.pi.transform import PiTargetModel, normalize_anthropic_tool_call_id, rewrite_for_model

DEFAULT_ANTHROPIC_MODEL = "claude-opus-4-5"
"""The target when a session's last model is not an Anthropic one (P9.10 used the same)."""


ANTHROPIC_MESSAGES_API = "anthropic-messages"


def target_model(context: PiContext, model_id: str | None = None) -> PiTargetModel:
    """The Anthropic model a request is for: ``model_id``, else the session's own model when it speaks the
    Anthropic Messages API (P8.3: the ``anthropic`` provider, or a custom provider of pi's ``models.json``
    with ``api: "anthropic-messages"``, as its replies record; pi sends its next request there, so their
    signed thinking stays thinking, P5.2), else :data:`DEFAULT_ANTHROPIC_MODEL`."""
    if model_id is not None:
        return PiTargetModel(api=ANTHROPIC_MESSAGES_API, provider="anthropic", id=model_id)
    own = context.model
    if own is not None and own.provider == "anthropic":
        return PiTargetModel(api=ANTHROPIC_MESSAGES_API, provider="anthropic", id=own.model_id)
    if own is not None and _speaks_anthropic_messages(context, own.provider, own.model_id):
        return PiTargetModel(api=ANTHROPIC_MESSAGES_API, provider=own.provider, id=own.model_id)
    return PiTargetModel(api=ANTHROPIC_MESSAGES_API, provider="anthropic", id=DEFAULT_ANTHROPIC_MODEL)


def _speaks_anthropic_messages(context: PiContext, provider: str, model_id: str) -> bool:
    """Whether the session's latest reply from ``provider``/``model_id`` came over the Messages API."""
    for message in reversed(context.messages):
        if isinstance(message, PiAssistantMessage) and message.provider == provider and message.model == model_id:
            return message.api == ANTHROPIC_MESSAGES_API
    return False


@dataclass(frozen=True, slots=True)
class PiLlmView:
    """A session's context at a leaf, converted for the LLM."""

    context: PiContext
    llm: list[PiLlmMessage]
    target: PiTargetModel


def llm_view(
    session: PiSession, *, leaf: str | _LastEntry | None = LAST_ENTRY, model_id: str | None = None
) -> PiLlmView:
    context = build_session_context(session.entries, leaf)
    return PiLlmView(context=context, llm=convert_to_llm(context.messages), target=target_model(context, model_id))


def pi_own_request(view: PiLlmView, *, now_ms: int = 0) -> dict[str, Any]:
    """``{"messages": [...]}`` exactly as pi would send it (no cache control, like ``agentbus normalize``)."""
    messages: list[ApiObject] = convert_messages(view.llm, view.target, cache_retention="none", now_ms=now_ms)
    return {"messages": messages}


def claude_code_messages(view: PiLlmView, *, session_id: str, cwd: str | None) -> list[Message]:
    """The context as Claude Code messages on one linear chain (ours; what a replay publishes)."""
    rewritten = rewrite_for_model(view.llm, view.target, normalize_anthropic_tool_call_id)
    entries = [_as_entry(index, message) for index, message in enumerate(rewritten)]
    header = {"type": "session", "id": session_id, "cwd": cwd}
    lines = session_to_claude_code(header, entries)
    return [parse_message({key: value for key, value in line.items() if key != STASH}) for line in lines]


def context_as_claude_code(session: PiSession, *, leaf: str | _LastEntry | None = LAST_ENTRY) -> list[Message]:
    """Ours: the session's context at ``leaf`` (P8) as Claude Code messages; what ``agentbus normalize``
    normalizes and what ``agentbus replay`` publishes for a pi file."""
    view = llm_view(session, leaf=leaf)
    return claude_code_messages(view, session_id=session.session_id, cwd=session.header.cwd)


def with_prompt(view: PiLlmView, prompt: str, *, now_ms: int = 0) -> PiLlmView:
    """``view`` with a new user prompt appended, as pi's ``prompt()`` does before a request."""
    return replace(view, llm=[*view.llm, PiUserMessage(content=prompt, timestamp=now_ms)])


def _as_entry(index: int, message: PiLlmMessage) -> dict[str, Any]:
    wire = message.to_wire()
    timestamp = message.timestamp
    return {
        "type": "message",
        "id": f"context-{index}",
        "parentId": f"context-{index - 1}" if index else None,
        "timestamp": ms_to_iso(timestamp) if isinstance(timestamp, int | float) else None,
        "message": wire,
    }
