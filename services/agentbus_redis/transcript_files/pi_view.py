"""pi session files wherever a transcript goes (issue 17): telling the two formats apart, reading a pi file
with its line problems, and the API request of its context — ours (the context as Claude Code messages,
then agentbus' normalizer, §4) or pi's own (``--rules pi``: its ``transformMessages`` and Anthropic
conversion, P5/P6, faithful including what pi does not repair)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Literal

from agentbus_redis.api.types import MessagesRequest
from agentbus_redis.clock import Clock, utc_now
from agentbus_redis.errors import BrokenTranscriptChain, UnusableTranscript
from agentbus_redis.ids import IdSource, random_uuid
from agentbus_redis.messages.kinds import Message
from agentbus_redis.normalize import NormalizedRequest, NormalizeOptions, to_api_request
from agentbus_redis.pi.constants import TranscriptFormat
from agentbus_redis.pi.context import iso_to_ms
from agentbus_redis.pi.request import context_as_claude_code, llm_view, pi_own_request, with_prompt
from agentbus_redis.pi.session import NotAPiSession, PiSession, looks_like_pi_session, read_pi_session

NormalizeRules = Literal["agentbus", "pi"]


def transcript_format(data: bytes, forced: TranscriptFormat | None = None) -> TranscriptFormat:
    """``forced``, else ``pi`` when the first line is a pi session header (P7.3), else ``claude-code``."""
    if forced is not None:
        return forced
    return "pi" if looks_like_pi_session(data) else "claude-code"


def read_pi_file(data: bytes, *, ids: IdSource = random_uuid) -> PiSession:
    """The pi session in ``data`` (migrated to v3 in memory, P7.9); :class:`UnusableTranscript` when it is
    none (``--format pi`` on another file)."""
    try:
        return read_pi_session(data, ids=ids)
    except NotAPiSession as error:
        kind = "empty" if not data.strip() else "not_pi"
        raise UnusableTranscript(
            kind, f"not a pi session: {error}", line_number=None if kind == "empty" else 1
        ) from None


def pi_notices(file: object, session: PiSession) -> list[str]:
    """The stderr lines for the lines pi would skip silently (and those read with U+FFFD), like the
    Claude Code path's :func:`agentbus_redis.transcript_files.api_view.read_notices`."""
    skipped = [problem for problem in session.problems if problem.kind != "invalid_utf8"]
    notices = []
    if skipped:
        listed = ", ".join(f"{problem.line} ({problem.kind})" for problem in skipped)
        notices.append(f"agentbus: {file}: skipped malformed line(s) {listed}")
    notices.extend(
        f"agentbus: {file}: warning: {problem}" for problem in session.problems if problem.kind == "invalid_utf8"
    )
    return notices


def require_pi_leaf(session: PiSession, leaf: str | None) -> None:
    """pi falls back to the last entry for an unknown leaf (P8.1); the CLI names the mistake instead."""
    if leaf is not None and all(entry.id != leaf for entry in session.entries):
        raise BrokenTranscriptChain(leaf, f"no entry with id {leaf} in the pi session")


def pi_context_messages(session: PiSession, *, leaf: str | None = None) -> list[Message]:
    """Ours: the context at ``leaf`` (default: the last entry, P8.1) as Claude Code messages; refuses a
    session whose context is empty."""
    require_pi_leaf(session, leaf)
    messages = context_as_claude_code(session, leaf=leaf) if leaf is not None else context_as_claude_code(session)
    if not messages:
        raise UnusableTranscript("no_conversation", "the pi session's context holds no message (P8)")
    return messages


def pi_request(
    session: PiSession,
    *,
    leaf: str | None = None,
    prompt: str | None = None,
    rules: NormalizeRules = "agentbus",
    clock: Clock = utc_now,
    ids: IdSource = random_uuid,
) -> MessagesRequest:
    """``{"messages": [...]}`` for the context at ``leaf`` (with ``prompt`` appended as a new user turn):
    ours by default, pi's own with ``rules="pi"``."""
    if rules == "pi":
        require_pi_leaf(session, leaf)
        view = llm_view(session, leaf=leaf) if leaf is not None else llm_view(session)
        if prompt is not None:
            view = with_prompt(view, prompt, now_ms=iso_to_ms(clock()) or 0)
        own: MessagesRequest = pi_own_request(view)  # type: ignore[assignment]
        return own
    normalized = ours_normalized(pi_context_messages(session, leaf=leaf), prompt=prompt, clock=clock, ids=ids)
    return {"messages": normalized.request["messages"]}


def ours_normalized(
    messages: Sequence[Message], *, prompt: str | None = None, clock: Clock = utc_now, ids: IdSource = random_uuid
) -> NormalizedRequest:
    """agentbus' normalizer (§4) on the context's Claude Code messages, as the normalization worker runs it."""
    return to_api_request(messages, options=NormalizeOptions(), prompt=prompt, clock=clock, ids=ids)


def claude_code_jsonl(messages: Sequence[Message]) -> bytes:
    """Messages as a Claude Code JSONL transcript."""
    return "".join(json.dumps(message.to_wire(), ensure_ascii=False) + "\n" for message in messages).encode()
