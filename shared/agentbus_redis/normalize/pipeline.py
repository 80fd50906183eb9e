"""``to_api_request``: a stored conversation → a Messages API request the API accepts.

tombstones (R6) → slice from the last compact boundary (R4.24a) → optional prompt → optional user
context (R4.24c) → ``normalize_messages_for_api`` (R4.1–R4.21) → API client steps (R4.22–R4.23) →
safety finalizer → request params.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Annotated

from pydantic import BaseModel, ConfigDict, SkipValidation

from agentbus_redis.api.types import MessagesRequest
from agentbus_redis.api.validation import ApiViolation, validate_api_request
from agentbus_redis.clock import Clock, utc_now
from agentbus_redis.ids import IdSource, random_uuid
from agentbus_redis.messages.factories import create_user_message
from agentbus_redis.messages.kinds import Message, UserMessage
from agentbus_redis.messages.system import CompactBoundarySystemMessage
from agentbus_redis.messages.tombstones import apply_tombstones
from agentbus_redis.normalize.api_client_steps import apply_api_client_steps
from agentbus_redis.normalize.attachments.rendered import place_system_messages, system_turns
from agentbus_redis.normalize.normalize_for_api import normalize_messages_for_api
from agentbus_redis.normalize.options import NormalizeOptions
from agentbus_redis.normalize.report import NormalizationReport
from agentbus_redis.normalize.safety.api_safety import make_api_safe
from agentbus_redis.normalize.to_params import to_messages_request

DEFAULT_OPTIONS = NormalizeOptions()
"""Claude Code's defaults: every gate OFF, tool search off, interactive, unknown tool set."""


class NormalizedRequest(BaseModel):
    """The request body to send and the report of every repair made to get there."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    request: Annotated[MessagesRequest, SkipValidation]
    """Plain JSON dicts, exactly as built (not re-validated, so thinking blocks stay byte-identical)."""
    report: NormalizationReport


def messages_after_compact_boundary(messages: Sequence[Message]) -> list[Message]:
    """R4.24a: the messages from the last compact boundary on (the boundary included; R4.4 drops
    it); everything when there is none."""
    for index in range(len(messages) - 1, -1, -1):
        if isinstance(messages[index], CompactBoundarySystemMessage):
            return list(messages[index:])
    return list(messages)


def user_context_text(context: Mapping[str, str]) -> str:
    """R4.24c ``prependUserContext``: the context reminder, byte-exact (including the source's
    six-space indent before ``IMPORTANT``)."""
    entries = "\n".join(f"# {key}\n{value}" for key, value in context.items())
    return (
        "<system-reminder>\nAs you answer the user's questions, you can use the following context:\n"
        f"{entries}\n\n      IMPORTANT: this context may or may not be relevant to your tasks. You should not "
        "respond to this context unless it is highly relevant to your task.\n</system-reminder>\n"
    )


def prepend_user_context(
    messages: Sequence[Message],
    context: Mapping[str, str] | None,
    *,
    clock: Clock = utc_now,
    ids: IdSource = random_uuid,
) -> list[Message]:
    """R4.24c: a meta user message with the context goes first, unless the context is empty."""
    if not context:
        return list(messages)
    return [create_user_message(user_context_text(context), is_meta=True, clock=clock, ids=ids), *messages]


def to_api_request(
    history: Sequence[Message],
    *,
    options: NormalizeOptions = DEFAULT_OPTIONS,
    prompt: str | None = None,
    clock: Clock = utc_now,
    ids: IdSource = random_uuid,
) -> NormalizedRequest:
    """The full pipeline. ``prompt``, when given, is appended as a new human user message (as a user
    typing it after resume). ``clock``/``ids`` stamp the messages the pipeline creates.

    Raises :class:`agentbus_redis.errors.ImageSizeError` (R4.21) and, in strict pairing mode,
    :class:`agentbus_redis.errors.PairingRepairRequired` (R4.30).
    """
    messages = apply_tombstones(history)
    if options.from_last_compact_boundary:
        messages = messages_after_compact_boundary(messages)
    if prompt is not None:
        prompt_message: UserMessage = create_user_message(prompt, clock=clock, ids=ids)
        messages = [*messages, prompt_message]
    messages = prepend_user_context(messages, options.user_context, clock=clock, ids=ids)
    turns = system_turns(messages)
    normalized, report = normalize_messages_for_api(messages, options=options)
    stepped, step_repairs, pairing = apply_api_client_steps(normalized, options=options, clock=clock, ids=ids)
    safe, safety_repairs = make_api_safe(stepped, options=options, clock=clock, ids=ids)
    request = to_messages_request(safe, tool_search_enabled=options.tool_search_enabled, model=options.target_model)
    if turns:
        # role "system" messages the client recorded (Claude Code 2.1.332's renderedRole), between turns.
        request["messages"] = place_system_messages(request["messages"], safe, turns)
    return NormalizedRequest(request=request, report=report.extended([*step_repairs, *safety_repairs], pairing=pairing))


def validate_request(
    request: MessagesRequest, *, options: NormalizeOptions = DEFAULT_OPTIONS, allow_prefill: bool = False
) -> list[ApiViolation]:
    """``validate_api_request`` for a request ``to_api_request`` built with ``options``: with
    ``thinking_enabled`` False or True the request is checked in that thinking mode (API §1.10); with
    ``None`` its sender sets thinking and fits it to the open turn (``build_model_params`` sends thinking
    only when the open turn of a tool loop starts with it, and strips the open turn's thinking when it
    sends none), so the two thinking-mode rules are not known to apply and are skipped."""
    if options.thinking_enabled is None:
        return validate_api_request(request["messages"], thinking_enabled=None, allow_prefill=allow_prefill)
    return validate_api_request(request, thinking_enabled=options.thinking_enabled, allow_prefill=allow_prefill)
