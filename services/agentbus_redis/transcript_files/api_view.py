"""The API view of a transcript file: resume its chain (R7.14–R7.20) and normalize it for the Messages
API (§4). Shared by ``agentbus normalize`` and ``agentbus transcript export``."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

from agentbus_redis.api.types import MessagesRequest
from agentbus_redis.clock import Clock, utc_now
from agentbus_redis.ids import IdSource, random_uuid
from agentbus_redis.messages.constants import SYNTHETIC_TOOL_RESULT_PLACEHOLDER
from agentbus_redis.normalize import NormalizedRequest, NormalizeOptions, to_api_request
from agentbus_redis.transcript import (
    ResumeResult,
    build_transcript,
    deserialize_for_resume,
    diagnose_no_conversation,
    read_transcript,
    remove_chain_fields,
    resume_session,
    subagent_chain,
    well_formed_json,
)


@dataclass(frozen=True, slots=True)
class ApiView:
    """A resumed chain and the request built from it."""

    resumed: ResumeResult
    normalized: NormalizedRequest

    @property
    def request(self) -> MessagesRequest:
        return self.normalized.request

    @property
    def messages_body(self) -> MessagesRequest:
        """``{"messages": [...]}``: the request without ``model`` or any other key."""
        return {"messages": self.request["messages"]}


def api_view_of_transcript(
    data: bytes,
    *,
    leaf: str | None = None,
    prompt: str | None = None,
    options: NormalizeOptions | None = None,
    clock: Clock = utc_now,
    ids: IdSource = random_uuid,
) -> ApiView:
    """Resume the main chain of ``data`` (or the chain ending at ``leaf``; for a sub-agent file, whose
    lines are all sidechain, the agent's chain) and normalize it, appending
    ``prompt`` as a new human turn when given (as a user resuming and typing would).

    Raises :class:`agentbus_redis.errors.BrokenTranscriptChain` for an unknown ``leaf`` and the normalizer's
    errors (e.g. :class:`agentbus_redis.errors.ImageSizeError`)."""
    resumed = resume_session(data, leaf=leaf, clock=clock, ids=ids)
    if leaf is None and not resumed.messages:
        resumed = resume_subagent(data, clock=clock, ids=ids) or resumed
    normalized = to_api_request(
        resumed.messages, options=options or NormalizeOptions(), prompt=prompt, clock=clock, ids=ids
    )
    return ApiView(resumed=resumed, normalized=normalized)


def require_conversation(data: bytes, resumed: ResumeResult, *, fresh_start: bool = False) -> None:
    """Raise :class:`agentbus_redis.errors.UnusableTranscript` (kind, line, reason) when ``data`` resumed to no
    message. With ``fresh_start`` (a prompt will start the conversation) an empty or metadata-only file
    is accepted, but a binary or non-JSONL one never is."""
    if resumed.messages:
        return
    problem = diagnose_no_conversation(read_transcript(data))
    if not (fresh_start and problem.kind in {"empty", "no_conversation"}):
        raise problem


def resume_subagent(data: bytes, *, clock: Clock, ids: IdSource) -> ResumeResult | None:
    """A sub-agent transcript resumed like Claude Code's ``getAgentTranscript`` (its latest sidechain
    leaf), then deserialized as a resume would (R7.20). ``None`` when the file has no sidechain chain."""
    parse = read_transcript(data)
    chain = subagent_chain(build_transcript(parse))
    if not chain:
        return None
    result = deserialize_for_resume(remove_chain_fields(chain), clock=clock, ids=ids)
    return dataclasses.replace(
        result,
        leaf_uuid=chain[-1].uuid,
        session_id=chain[-1].session_id,
        line_errors=parse.errors,
        chain_uuids=frozenset(message.uuid for message in chain),
        line_warnings=parse.warnings,
    )


def read_notices(file: object, resumed: ResumeResult) -> list[str]:
    """The stderr lines for what the resume could not take as written: malformed lines (skipped), chain
    lines no model accepts (walked through, left out of the API view), and lines whose invalid UTF-8
    bytes were read as U+FFFD (kept). Lone surrogates are reported once, by :func:`encoded_body`, only
    when they reach the output."""
    notices: list[str] = []
    if resumed.line_errors:
        numbers = ", ".join(str(error.line_number) for error in resumed.line_errors)
        notices.append(f"agentbus: {file}: skipped malformed line(s) {numbers}")
    if resumed.skipped_lines:
        uuids = ", ".join(line.uuid for line in resumed.skipped_lines)
        notices.append(
            f"agentbus: {file}: left {len(resumed.skipped_lines)} chain line(s) no model accepts out of the "
            f"API view (uuid {uuids}; `agentbus transcript verify` names them)"
        )
    notices.extend(
        f"agentbus: {file}: warning: {warning}" for warning in resumed.line_warnings if warning.kind == "invalid_utf8"
    )
    return notices


def encoded_body(file: object, view: ApiView) -> tuple[str, str | None]:
    """The ``{"messages": [...]}`` JSON text, encodable as UTF-8 (lone surrogates from JSON escapes in the
    transcript replaced by U+FFFD), and the stderr line that says so when any was replaced."""
    text, replaced = well_formed_json(view.messages_body)
    if not replaced:
        return text, None
    return (
        text,
        f"agentbus: {file}: replaced {replaced} lone surrogate(s) (unpaired \\ud800-\\udfff) with U+FFFD in the output",
    )


def placeholder_locations(request: MessagesRequest) -> list[str]:
    """Where ``SYNTHETIC_TOOL_RESULT_PLACEHOLDER`` occurs in ``request`` (``messages[3].content[0]…``).

    The placeholder satisfies tool_use/tool_result pairing with fake content, so a request containing it
    must never become training data."""
    found: list[str] = []

    def walk(value: object, where: str) -> None:
        if isinstance(value, str):
            if value == SYNTHETIC_TOOL_RESULT_PLACEHOLDER:
                found.append(where)
        elif isinstance(value, dict):
            for key, item in value.items():
                walk(item, f"{where}.{key}" if where else str(key))
        elif isinstance(value, list):
            for index, item in enumerate(value):
                walk(item, f"{where}[{index}]")

    walk(request, "")
    return found
