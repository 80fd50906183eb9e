"""Resume deserialization (R7.20, ``deserializeMessagesWithInterruptDetection``) and the one-call
``resume_session`` (read → load → leaf → chain → deserialize).

The R4.14/R4.16 filters are the API normalizer's own (``agentbus_redis.normalize.passes.post_passes``); they only
touch assistant messages and adjacent user messages, so system and attachment messages in a resumed
chain pass through them unchanged.
"""

from __future__ import annotations

import posixpath
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Literal, cast

from agentbus_redis.clock import Clock
from agentbus_redis.errors import TranscriptLineError
from agentbus_redis.ids import IdSource
from agentbus_redis.messages.constants import CONTINUE_FROM_WHERE_YOU_LEFT_OFF, NO_RESPONSE_REQUESTED
from agentbus_redis.messages.content import TextBlock, ToolResultBlock, ToolUseBlock
from agentbus_redis.messages.factories import create_assistant_message, create_user_message
from agentbus_redis.messages.kinds import ApiMessage, AssistantMessage, AttachmentMessage, UserMessage
from agentbus_redis.messages.system import SystemMessageBase
from agentbus_redis.normalize.passes.post_passes import (
    filter_orphaned_thinking_only_messages,
    filter_whitespace_only_assistant_messages,
)
from agentbus_redis.transcript.chain import LeafMode, build_conversation_chain, remove_chain_fields, select_leaf
from agentbus_redis.transcript.fixups import ResumedMessage, TranscriptMessage, js_truthy
from agentbus_redis.transcript.lines import OtherMessageLine
from agentbus_redis.transcript.loader import build_transcript
from agentbus_redis.transcript.reader import TranscriptLineWarning, read_transcript
from agentbus_redis.wire import without_fields

Interruption = Literal["none", "interrupted_prompt", "interrupted_turn"]

PERMISSION_MODES = frozenset({"acceptEdits", "bypassPermissions", "default", "dontAsk", "plan", "auto"})
"""R7.20.2: the permission modes a resumed user message may keep (v2.1.88's ``PERMISSION_MODES``)."""

KAIROS_TERMINAL_TOOLS = frozenset({"SendUserMessage", "Brief", "SendUserFile"})
"""R7.20.5: tools whose result legitimately ends a turn in KAIROS (brief mode) builds. External
builds have none, so :func:`deserialize_for_resume` defaults to the empty set."""


@dataclass(frozen=True)
class ResumeResult:
    """The resumed, API-valid history and how the previous session ended.

    ``interruption`` is the detected kind: ``interrupted_turn`` means the continuation prompt
    ``Continue from where you left off.`` was appended (Claude Code reports that case as
    ``interrupted_prompt`` of the continuation); ``interrupted_message`` is the user message a
    caller would re-submit (the last prompt, or the continuation)."""

    messages: list[ResumedMessage]
    interruption: Interruption = "none"
    interrupted_message: UserMessage | None = None
    leaf_uuid: str | None = None
    session_id: str | None = None
    """The leaf's sessionId: the key for the session's metadata (R7.21)."""
    line_errors: tuple[TranscriptLineError, ...] = ()
    """Malformed lines of the file (Claude Code skips them; listed here so they can be reported)."""
    chain_uuids: frozenset[str] = frozenset()
    """The uuids of the chain walked from the leaf (R7.18), before the resume's clean-up (R7.20)."""
    line_warnings: tuple[TranscriptLineWarning, ...] = ()
    """Lines read, but not exactly as written (invalid UTF-8 bytes, lone surrogates)."""
    skipped_lines: tuple[OtherMessageLine, ...] = ()
    """Lines of the chain whose shape no model accepts: walked through, left out of ``messages``."""


def _relative_path(start: str, target: str) -> str:
    """Node's ``path.relative`` for POSIX paths, where the process cwd is ``start``."""
    if not target:
        return ""
    if not target.startswith("/") or not start.startswith("/"):
        normalized = posixpath.normpath(target)
        return "" if normalized == "." else normalized
    start_parts = [part for part in posixpath.normpath(start).split("/") if part]
    target_parts = [part for part in posixpath.normpath(target).split("/") if part]
    common = 0
    while common < min(len(start_parts), len(target_parts)) and start_parts[common] == target_parts[common]:
        common += 1
    return "/".join([".."] * (len(start_parts) - common) + target_parts[common:])


def migrate_legacy_attachment(message: ResumedMessage, cwd: str | None) -> ResumedMessage:
    """R7.20.1: ``new_file`` → ``file`` and ``new_directory`` → ``directory``; backfill ``displayPath``
    (relative to ``cwd``, else the message's own cwd) from ``filename``/``path``/``skillDir``."""
    if not isinstance(message, AttachmentMessage):
        return message
    attachment = dict(message.attachment)
    base = cwd if cwd is not None else message.cwd
    kind = attachment.get("type")
    renamed = {"new_file": ("file", "filename"), "new_directory": ("directory", "path")}
    if kind in renamed:
        new_kind, source_key = renamed[str(kind)]
        attachment["type"] = new_kind
    elif "displayPath" not in attachment:
        source_key = next((key for key in ("filename", "path", "skillDir") if key in attachment), "")
    else:
        return message
    source = attachment.get(source_key)
    if isinstance(source, str) and source:
        attachment["displayPath"] = _relative_path(base, source) if base else source
    if attachment == message.attachment:
        return message
    return message.model_copy(update={"attachment": attachment})


def drop_invalid_permission_mode(message: ResumedMessage) -> ResumedMessage:
    """R7.20.2: a user message's ``permissionMode`` outside :data:`PERMISSION_MODES` (a different
    build's mode, or null) is removed from the message."""
    if not isinstance(message, UserMessage) or "permission_mode" not in message.model_fields_set:
        return message
    if message.permission_mode in PERMISSION_MODES:
        return message
    return without_fields(message, "permission_mode")


def filter_unresolved_tool_uses(messages: Sequence[ResumedMessage]) -> list[ResumedMessage]:
    """R7.20.3: drop an assistant only when it has tool_use blocks and *none* of them has a
    tool_result anywhere in the list (partly answered assistants stay; R4.25–R4.29 fix them)."""
    tool_use_ids: set[str] = set()
    result_ids: set[str] = set()
    for message in messages:
        if isinstance(message, UserMessage | AssistantMessage):
            for block in message.blocks:
                if isinstance(block, ToolUseBlock):
                    tool_use_ids.add(block.id)
                elif isinstance(block, ToolResultBlock):
                    result_ids.add(block.tool_use_id)
    unresolved = tool_use_ids - result_ids
    if not unresolved:
        return list(messages)
    kept: list[ResumedMessage] = []
    for message in messages:
        if isinstance(message, AssistantMessage):
            ids = [block.id for block in message.blocks if isinstance(block, ToolUseBlock)]
            if ids and all(tool_use_id in unresolved for tool_use_id in ids):
                continue
        kept.append(message)
    return kept


def is_tool_use_result_message(message: ResumedMessage) -> bool:
    """``isToolUseResultMessage``: a user message whose first block is a tool_result, or that carries
    a truthy ``toolUseResult``."""
    if not isinstance(message, UserMessage):
        return False
    content = message.message.content
    first_is_result = not isinstance(content, str) and bool(content) and isinstance(content[0], ToolResultBlock)
    return first_is_result or js_truthy(message.tool_use_result)


def _is_terminal_tool_result(
    result: UserMessage, messages: Sequence[ResumedMessage], index: int, terminal_tools: frozenset[str]
) -> bool:
    """R7.20.5: the result answers a tool that ends a turn by design (brief mode)."""
    content = result.message.content
    if isinstance(content, str) or not content or not isinstance(content[0], ToolResultBlock):
        return False
    tool_use_id = content[0].tool_use_id
    for message in reversed(messages[:index]):
        if isinstance(message, AssistantMessage):
            for block in message.blocks:
                if isinstance(block, ToolUseBlock) and block.id == tool_use_id:
                    return block.name in terminal_tools
    return False


def _turn_relevant(message: ResumedMessage) -> bool:
    """Skip system messages (bookkeeping) and API-error assistants (never sent to the API, R4.4)."""
    if isinstance(message, AssistantMessage):
        return not message.is_api_error_message
    return not isinstance(message, SystemMessageBase)


def detect_turn_interruption(
    messages: Sequence[ResumedMessage], *, terminal_tools: frozenset[str] = frozenset()
) -> tuple[Interruption, UserMessage | None]:
    """R7.20.5 on the last message that is not system, not progress and not an API-error assistant."""
    index = next((i for i in range(len(messages) - 1, -1, -1) if _turn_relevant(messages[i])), -1)
    if index < 0:
        return "none", None
    last = messages[index]
    if isinstance(last, UserMessage):
        if last.is_meta or last.is_compact_summary:
            return "none", None
        if is_tool_use_result_message(last):
            if _is_terminal_tool_result(last, messages, index, terminal_tools):
                return "none", None
            return "interrupted_turn", None
        return "interrupted_prompt", last
    if isinstance(last, AttachmentMessage):
        return "interrupted_turn", None
    return "none", None


def _api_filters(messages: list[ResumedMessage]) -> list[ResumedMessage]:
    """R7.20.4: R4.14 then R4.16. Both only inspect assistants and merge adjacent user messages, so
    the other kinds in a resumed chain pass through untouched (hence the casts)."""
    as_api = cast("list[ApiMessage]", messages)
    without_thinking, _ = filter_orphaned_thinking_only_messages(as_api)
    without_blank, _ = filter_whitespace_only_assistant_messages(without_thinking)
    return cast("list[ResumedMessage]", without_blank)


def deserialize_for_resume(
    chain: Iterable[TranscriptMessage],
    *,
    clock: Clock,
    ids: IdSource,
    cwd: str | None = None,
    terminal_tools: frozenset[str] = frozenset(),
) -> ResumeResult:
    """R7.20 steps 1–7 on a loaded chain (step 8, session-start hooks, is the caller's).

    Lines of the chain no model accepts (:class:`OtherMessageLine`) are left out first, as Claude Code's
    normalization leaves out kinds the API does not know; they are listed in ``skipped_lines``.
    ``cwd`` is the directory legacy attachment paths are made relative to (Claude Code uses the
    process cwd; default: each message's own ``cwd``)."""
    understood: list[ResumedMessage] = []
    skipped: list[OtherMessageLine] = []
    for message in chain:
        if isinstance(message, OtherMessageLine):
            skipped.append(message)
        else:
            understood.append(message)
    migrated = [drop_invalid_permission_mode(migrate_legacy_attachment(message, cwd)) for message in understood]
    messages = _api_filters(filter_unresolved_tool_uses(migrated))
    interruption, interrupted = detect_turn_interruption(messages, terminal_tools=terminal_tools)
    if interruption == "interrupted_turn":
        continuation = create_user_message(
            [TextBlock(text=CONTINUE_FROM_WHERE_YOU_LEFT_OFF)], is_meta=True, clock=clock, ids=ids
        )
        messages.append(continuation)
        interrupted = continuation
    last_relevant = next(
        (i for i in range(len(messages) - 1, -1, -1) if not isinstance(messages[i], SystemMessageBase)), -1
    )
    if last_relevant >= 0 and isinstance(messages[last_relevant], UserMessage):
        sentinel = create_assistant_message(NO_RESPONSE_REQUESTED, clock=clock, ids=ids)
        messages.insert(last_relevant + 1, sentinel)
    return ResumeResult(
        messages=messages, interruption=interruption, interrupted_message=interrupted, skipped_lines=tuple(skipped)
    )


def resume_session(
    data: str | bytes | Iterable[str],
    *,
    leaf: str | None = None,
    mode: LeafMode = "jsonl_path",
    clock: Clock,
    ids: IdSource,
    cwd: str | None = None,
    strip_chain_fields: bool = True,
    terminal_tools: frozenset[str] = frozenset(),
) -> ResumeResult:
    """Read a transcript and return the history a resume starts from: R7.14 read → R7.14–R7.17 load →
    leaf (``leaf`` uuid, else R7.19 ``mode``) → R7.18 chain → R7.19 ``removeExtraFields`` (unless
    ``strip_chain_fields`` is false) → R7.20. A file without any usable leaf resumes as empty."""
    parse = read_transcript(data)
    transcript = build_transcript(parse)
    leaf_message = transcript.messages.get(leaf) if leaf is not None else select_leaf(transcript, mode)
    if leaf is not None and leaf_message is None:
        build_conversation_chain(transcript, leaf)  # raises BrokenTranscriptChain naming the uuid
    if leaf_message is None:
        return ResumeResult(messages=[], line_errors=parse.errors, line_warnings=parse.warnings)
    chain = build_conversation_chain(transcript, leaf_message.uuid)
    if strip_chain_fields:
        chain = remove_chain_fields(chain)
    result = deserialize_for_resume(chain, clock=clock, ids=ids, cwd=cwd, terminal_tools=terminal_tools)
    return ResumeResult(
        messages=result.messages,
        interruption=result.interruption,
        interrupted_message=result.interrupted_message,
        skipped_lines=result.skipped_lines,
        leaf_uuid=leaf_message.uuid,
        session_id=leaf_message.session_id,
        line_errors=parse.errors,
        chain_uuids=frozenset(message.uuid for message in chain),
        line_warnings=parse.warnings,
    )
