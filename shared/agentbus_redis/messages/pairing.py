"""tool_use / tool_result pairing repair (§4.6, R4.25–R4.30) and pairing queries.

The Messages API requires every ``tool_use`` of assistant message k to be answered by exactly one
``tool_result`` in message k+1, and every ``tool_result`` in k+1 to answer a ``tool_use`` of k
(API §1.1–1.4). :func:`ensure_tool_result_pairing` is Claude Code's last defensive layer before the
wire: one left-to-right pass that fills gaps with ``is_error`` placeholders and drops results that
answer nothing. It reports every repair; it never logs.

Out of scope here: the gated (``tengu_chair_sermon``) re-fold of ``<system-reminder>`` texts into
the patched user message (R4.28); the gate is OFF by default (§0) and the fold belongs to the
merge helpers of the normalizer.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from pydantic import BaseModel, ConfigDict

from agentbus_redis.clock import Clock, utc_now
from agentbus_redis.errors import AgentbusError
from agentbus_redis.ids import IdSource, random_uuid
from agentbus_redis.messages.constants import (
    NO_CONTENT_MESSAGE,
    ORPHANED_TOOL_RESULT_REMOVED,
    SYNTHETIC_TOOL_RESULT_PLACEHOLDER,
    TOOL_USE_INTERRUPTED,
)
from agentbus_redis.messages.content import (
    ContentBlock,
    ServerToolUseBlock,
    TextBlock,
    ToolResultBlock,
    ToolUseBlock,
    as_blocks,
    tool_use_id_of,
)
from agentbus_redis.messages.factories import create_user_message
from agentbus_redis.messages.kinds import ApiMessage, AssistantMessage, Message, UserMessage


class PairingRepairRequired(AgentbusError):
    """R4.30: strict pairing mode found a tool_use/tool_result mismatch and refuses to repair it
    (a response conditioned on synthetic placeholders is tainted training data). ``report`` is the
    :class:`agentbus_redis.messages.pairing.PairingReport` of what the repair would have changed."""

    def __init__(self, message: str, *, report: PairingReport) -> None:
        super().__init__(message)
        self.report = report


SERVER_TOOL_USE_TYPES = frozenset({"server_tool_use", "mcp_tool_use"})


class PairingFix(BaseModel):
    """One block the repair added or removed."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    tool_use_id: str | None
    """The id involved; ``None`` for a malformed block that carries no id."""
    message_index: int
    """Index in the *input* of the message that held the block (for a placeholder: the assistant
    whose ``tool_use`` had no result)."""


class PairingReport(BaseModel):
    """Everything :func:`ensure_tool_result_pairing` changed; empty when the input was already paired."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    placeholders_inserted: tuple[PairingFix, ...] = ()
    """R4.28/R4.29: synthetic ``is_error`` results for tool_uses without a result in the next message."""
    orphan_results_dropped: tuple[PairingFix, ...] = ()
    """R4.25/R4.28: tool_results that answer no tool_use of the preceding assistant."""
    duplicate_tool_uses_dropped: tuple[PairingFix, ...] = ()
    """R4.26: tool_use blocks whose id was already used earlier in the conversation."""
    duplicate_results_dropped: tuple[PairingFix, ...] = ()
    """R4.28: repeated tool_results for one id (the first is kept)."""
    server_tool_uses_dropped: tuple[PairingFix, ...] = ()
    """R4.26: server_tool_use/mcp_tool_use blocks without a result in the same assistant."""
    interrupted_assistants: tuple[int, ...] = ()
    """R4.26: input indexes of assistants emptied by the cleanup (now ``[Tool use interrupted]``)."""
    dropped_messages: tuple[int, ...] = ()
    """R4.25: input indexes of user messages removed because only orphaned results were in them."""
    emptied_messages: tuple[int, ...] = ()
    """R4.28: input indexes of user messages replaced by a meta ``(no content)`` message."""
    inserted_messages: tuple[int, ...] = ()
    """R4.29: *output* indexes of the meta user messages inserted to carry placeholders."""

    @property
    def repaired(self) -> bool:
        """True when anything was changed (what strict mode refuses, R4.30)."""
        return any(
            (
                self.placeholders_inserted,
                self.orphan_results_dropped,
                self.duplicate_tool_uses_dropped,
                self.duplicate_results_dropped,
                self.server_tool_uses_dropped,
                self.interrupted_assistants,
                self.dropped_messages,
                self.emptied_messages,
                self.inserted_messages,
            )
        )

    def summary(self) -> str:
        """A one-line description naming the ids involved (for errors and service logs)."""
        parts: list[str] = []
        for name in (
            "placeholders_inserted",
            "orphan_results_dropped",
            "duplicate_tool_uses_dropped",
            "duplicate_results_dropped",
            "server_tool_uses_dropped",
        ):
            fixes: tuple[PairingFix, ...] = getattr(self, name)
            if fixes:
                rendered = ", ".join(f"{fix.tool_use_id}@{fix.message_index}" for fix in fixes)
                parts.append(f"{name}=[{rendered}]")
        for name in ("interrupted_assistants", "dropped_messages", "emptied_messages", "inserted_messages"):
            indexes: tuple[int, ...] = getattr(self, name)
            if indexes:
                parts.append(f"{name}={list(indexes)}")
        return "; ".join(parts) if parts else "no repair"


@dataclass
class _PairingState:
    """The pass's accumulators: the output, the cross-message ``allSeen`` set, and the report lists."""

    result: list[ApiMessage] = field(default_factory=list)
    all_seen: set[str] = field(default_factory=set)
    placeholders: list[PairingFix] = field(default_factory=list)
    orphans: list[PairingFix] = field(default_factory=list)
    duplicate_uses: list[PairingFix] = field(default_factory=list)
    duplicate_results: list[PairingFix] = field(default_factory=list)
    server_uses: list[PairingFix] = field(default_factory=list)
    interrupted: list[int] = field(default_factory=list)
    dropped: list[int] = field(default_factory=list)
    emptied: list[int] = field(default_factory=list)
    inserted: list[int] = field(default_factory=list)

    def report(self) -> PairingReport:
        return PairingReport(
            placeholders_inserted=tuple(self.placeholders),
            orphan_results_dropped=tuple(self.orphans),
            duplicate_tool_uses_dropped=tuple(self.duplicate_uses),
            duplicate_results_dropped=tuple(self.duplicate_results),
            server_tool_uses_dropped=tuple(self.server_uses),
            interrupted_assistants=tuple(self.interrupted),
            dropped_messages=tuple(self.dropped),
            emptied_messages=tuple(self.emptied),
            inserted_messages=tuple(self.inserted),
        )


def _is_tool_result(block: ContentBlock) -> bool:
    """Any block typed ``tool_result``, including a malformed one without ``tool_use_id``."""
    return block.type == "tool_result"


def _result_id(block: ContentBlock) -> str | None:
    return block.tool_use_id if isinstance(block, ToolResultBlock) else None


def _server_tool_use_id(block: ContentBlock) -> str | None:
    if isinstance(block, ServerToolUseBlock):
        return block.id
    value = (block.model_extra or {}).get("id")
    return value if isinstance(value, str) else None


def _with_content(message: UserMessage, content: list[ContentBlock]) -> UserMessage:
    return message.model_copy(update={"message": message.message.model_copy(update={"content": content})})


def _strip_orphan_results(message: ApiMessage, index: int, state: _PairingState) -> None:
    """R4.25: a user message with array content whose previous *output* entry is not an assistant
    loses all its tool_results; emptied, it is dropped, or (as the very first output) keeps the
    ``[Orphaned tool result removed due to conversation resume]`` text so the request still starts
    with a user message. String-content users pass untouched."""
    previous = state.result[-1] if state.result else None
    content = message.message.content
    if not isinstance(message, UserMessage) or isinstance(content, str) or isinstance(previous, AssistantMessage):
        state.result.append(message)
        return
    kept = [block for block in content if not _is_tool_result(block)]
    if len(kept) == len(content):
        state.result.append(message)
        return
    state.orphans.extend(
        PairingFix(tool_use_id=_result_id(b), message_index=index) for b in content if _is_tool_result(b)
    )
    if kept:
        state.result.append(_with_content(message, kept))
    elif not state.result:
        state.result.append(_with_content(message, [TextBlock(text=ORPHANED_TOOL_RESULT_REMOVED)]))
    else:
        state.dropped.append(index)


def _clean_assistant(message: AssistantMessage, index: int, state: _PairingState) -> tuple[AssistantMessage, list[str]]:
    """R4.26: drop tool_uses whose id was already used anywhere earlier (first occurrence wins) and
    server/mcp tool uses without a result block in this same assistant; content emptied by that
    becomes ``[Tool use interrupted]``. Returns the (possibly new) message and its surviving
    tool_use ids in order. Malformed tool_use blocks (no id) are not this pass's concern."""
    blocks = message.blocks
    server_result_ids = {rid for rid in map(tool_use_id_of, blocks) if rid is not None}
    kept: list[ContentBlock] = []
    seen: list[str] = []
    for block in blocks:
        if isinstance(block, ToolUseBlock):
            if block.id in state.all_seen:
                state.duplicate_uses.append(PairingFix(tool_use_id=block.id, message_index=index))
                continue
            state.all_seen.add(block.id)
            seen.append(block.id)
        if block.type in SERVER_TOOL_USE_TYPES:
            server_id = _server_tool_use_id(block)
            if server_id not in server_result_ids:
                state.server_uses.append(PairingFix(tool_use_id=server_id, message_index=index))
                continue
        kept.append(block)
    if len(kept) == len(blocks):
        return message, seen
    if not kept:
        state.interrupted.append(index)
        kept = [TextBlock(text=TOOL_USE_INTERRUPTED, citations=[])]
    payload = message.message.model_copy(update={"content": kept})
    return message.model_copy(update={"message": payload}), seen


@dataclass(frozen=True)
class _NextResults:
    """R4.27: what the next input message answers."""

    ids: tuple[str | None, ...]
    """Distinct tool_result ids of the next message, in order (``None``: a result without id)."""
    has_duplicates: bool


def _results_of_next(next_message: ApiMessage | None) -> _NextResults:
    """R4.27: only the immediately following input message counts, and only a user one with array content."""
    if not isinstance(next_message, UserMessage) or isinstance(next_message.message.content, str):
        return _NextResults(ids=(), has_duplicates=False)
    ids: dict[str | None, None] = {}
    has_duplicates = False
    for block in next_message.message.content:
        if _is_tool_result(block):
            result_id = _result_id(block)
            has_duplicates = has_duplicates or result_id in ids
            ids[result_id] = None
    return _NextResults(ids=tuple(ids), has_duplicates=has_duplicates)


def synthetic_tool_result(tool_use_id: str) -> ToolResultBlock:
    """R4.28: the placeholder result for a tool_use whose real result is missing."""
    return ToolResultBlock(tool_use_id=tool_use_id, content=SYNTHETIC_TOOL_RESULT_PLACEHOLDER, is_error=True)


def _patch_next_user(
    next_message: UserMessage,
    index: int,
    missing: list[str],
    orphaned: set[str | None],
    state: _PairingState,
    clock: Clock,
    ids: IdSource,
) -> ApiMessage:
    """R4.28: placeholders first, then the next message's content (a string becomes one text block)
    without orphaned results and without repeated results (first kept). Emptied, the message is
    replaced by a fresh meta ``(no content)`` user message."""
    remaining: list[ContentBlock] = []
    answered: set[str | None] = set()
    for block in as_blocks(next_message.message.content):
        if _is_tool_result(block):
            result_id = _result_id(block)
            if result_id in orphaned:
                state.orphans.append(PairingFix(tool_use_id=result_id, message_index=index))
                continue
            if result_id in answered:
                state.duplicate_results.append(PairingFix(tool_use_id=result_id, message_index=index))
                continue
            answered.add(result_id)
        remaining.append(block)
    patched: list[ContentBlock] = [*map(synthetic_tool_result, missing), *remaining]
    if patched:
        return _with_content(next_message, patched)
    state.emptied.append(index)
    return create_user_message(NO_CONTENT_MESSAGE, is_meta=True, clock=clock, ids=ids)


def _pair_assistant(
    assistant: AssistantMessage,
    next_message: ApiMessage | None,
    index: int,
    state: _PairingState,
    clock: Clock,
    ids: IdSource,
) -> int:
    """R4.26–R4.29 for the assistant at input ``index``; returns how many input messages were consumed."""
    cleaned, tool_use_ids_ = _clean_assistant(assistant, index, state)
    state.result.append(cleaned)
    results = _results_of_next(next_message)
    missing = [tool_use_id for tool_use_id in tool_use_ids_ if tool_use_id not in results.ids]
    orphaned = {result_id for result_id in results.ids if result_id not in tool_use_ids_}
    if not missing and not orphaned and not results.has_duplicates:
        return 1
    state.placeholders.extend(PairingFix(tool_use_id=tool_use_id, message_index=index) for tool_use_id in missing)
    if isinstance(next_message, UserMessage):
        state.result.append(_patch_next_user(next_message, index + 1, missing, orphaned, state, clock, ids))
        return 2
    # R4.29: the next message is an assistant or the end of the list (so only ``missing`` is non-empty).
    state.inserted.append(len(state.result))
    placeholders: list[ContentBlock] = [synthetic_tool_result(tool_use_id) for tool_use_id in missing]
    state.result.append(create_user_message(placeholders, is_meta=True, clock=clock, ids=ids))
    return 1


def ensure_tool_result_pairing(
    messages: Sequence[ApiMessage],
    *,
    strict: bool = False,
    clock: Clock = utc_now,
    ids: IdSource = random_uuid,
) -> tuple[list[ApiMessage], PairingReport]:
    """R4.25–R4.30: one left-to-right pass that makes every tool_use of assistant k answered exactly
    once in message k+1 and every tool_result of k+1 answer a tool_use of k.

    ``clock``/``ids`` stamp the meta user messages the repair creates. With ``strict`` (R4.30, the
    training-data mode) any repair raises :class:`PairingRepairRequired` instead of returning.
    """
    state = _PairingState()
    index = 0
    while index < len(messages):
        message = messages[index]
        if isinstance(message, AssistantMessage):
            next_message = messages[index + 1] if index + 1 < len(messages) else None
            index += _pair_assistant(message, next_message, index, state, clock, ids)
        else:
            _strip_orphan_results(message, index, state)
            index += 1
    report = state.report()
    if strict and report.repaired:
        msg = f"tool_use/tool_result pairing needs repair (strict mode): {report.summary()}"
        raise PairingRepairRequired(msg, report=report)
    return state.result, report


def tool_use_ids(message: Message) -> list[str]:
    """The ids of the client ``tool_use`` blocks of an assistant message, in order (``[]`` otherwise)."""
    if not isinstance(message, AssistantMessage):
        return []
    return [block.id for block in message.blocks if isinstance(block, ToolUseBlock)]


def tool_result_ids(message: Message) -> list[str]:
    """The ``tool_use_id`` of every ``tool_result`` block of a user message, in order (``[]`` otherwise)."""
    if not isinstance(message, UserMessage) or isinstance(message.message.content, str):
        return []
    return [block.tool_use_id for block in message.message.content if isinstance(block, ToolResultBlock)]


def unpaired_tool_use_ids(messages: Sequence[Message]) -> list[str]:
    """Ids of tool_uses that no ``tool_result`` answers anywhere *after* them (e.g. the in-flight
    calls of an interrupted turn), in order of first appearance."""
    answered_later: set[str] = set()
    unpaired: list[str] = []
    for message in reversed(messages):
        answered_later.update(tool_result_ids(message))
        unpaired.extend(tid for tid in reversed(tool_use_ids(message)) if tid not in answered_later)
    seen: set[str] = set()
    ordered: list[str] = []
    for tool_use_id in reversed(unpaired):
        if tool_use_id not in seen:
            seen.add(tool_use_id)
            ordered.append(tool_use_id)
    return ordered
