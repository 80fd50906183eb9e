"""The per-message fold of ``normalizeMessagesForAPI`` (§4.2, R4.5–R4.8): left to right into one
list of user/assistant messages."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from agentbus_redis.messages.content import TextBlock
from agentbus_redis.messages.factories import create_user_message
from agentbus_redis.messages.kinds import ApiMessage, AssistantMessage, AttachmentMessage, UserMessage
from agentbus_redis.messages.system import LocalCommandSystemMessage
from agentbus_redis.normalize.attachments.render import (
    SYSTEM_REMINDER_OPEN,
    normalize_attachment_for_api,
    wrap_in_system_reminder,
)
from agentbus_redis.normalize.attachments.rendered import task_notification_as_sent
from agentbus_redis.normalize.options import NormalizeOptions
from agentbus_redis.normalize.passes.content_ops import is_tool_result_message, with_user_content
from agentbus_redis.normalize.passes.merge import (
    merge_assistant_messages,
    merge_user_messages,
    merge_user_messages_and_tool_results,
)
from agentbus_redis.normalize.passes.prepass import ApiBound
from agentbus_redis.normalize.passes.tool_blocks import (
    add_tool_loaded_boundary,
    normalize_tool_uses,
    strip_tool_references,
    strip_unavailable_tool_references,
)
from agentbus_redis.normalize.report import PassResult, Repair, RepairKind, Repairs


def local_command_as_user(message: LocalCommandSystemMessage) -> UserMessage:
    """R4.5: a local command's text goes to the model as a user message with the command's uuid and
    timestamp (so it can refer to earlier command output)."""
    return create_user_message(message.content or "", uuid=message.uuid, timestamp=message.timestamp)


def _append_user(result: list[ApiMessage], message: UserMessage, options: NormalizeOptions) -> None:
    """R4.5/R4.6 step 4: merge into a preceding user message (R4.10), else append."""
    last = result[-1] if result else None
    if isinstance(last, UserMessage):
        result[-1] = merge_user_messages(last, message, snip=options.snip)
    else:
        result.append(message)


def strip_media_for_error(
    message: UserMessage, strip_targets: Mapping[str, frozenset[str]]
) -> tuple[UserMessage | None, Repairs]:
    """R4.6 step 2: a meta user message targeted by R4.3 loses its blocks of the failing types (so the
    rejected PDF/image is not re-sent on every call); emptied, it is dropped (``None``)."""
    types = strip_targets.get(message.uuid)
    content = message.message.content
    if not types or not message.is_meta or isinstance(content, str):
        return message, []
    kept = [block for block in content if block.type not in types]
    if len(kept) == len(content):
        return message, []
    repair = Repair(
        kind=RepairKind.MEDIA_STRIPPED_AFTER_ERROR,
        rule="R4.6",
        message_uuid=message.uuid,
        detail=f"{len(content) - len(kept)} {'/'.join(sorted(types))} block(s)",
    )
    return (with_user_content(message, kept) if kept else None), [repair]


def fold_user(
    message: UserMessage, options: NormalizeOptions, strip_targets: Mapping[str, frozenset[str]]
) -> tuple[UserMessage | None, Repairs]:
    """R4.6 steps 1–3 for one user message (step 4, the merge, is the caller's); a background task's
    notification as Claude Code 2.1.332 sends it (``agentbus_redis.normalize.attachments.rendered``)."""
    message = task_notification_as_sent(message)
    if options.tool_search_enabled:
        message, repairs = strip_unavailable_tool_references(message, options)
    else:
        message, repairs = strip_tool_references(message)
    stripped, media_repairs = strip_media_for_error(message, strip_targets)
    repairs += media_repairs
    if stripped is None:
        return None, repairs
    if not options.toolref_defer:
        stripped = add_tool_loaded_boundary(stripped)
    return stripped, repairs


def _stops_merge_walk(message: ApiMessage) -> bool:
    """R4.7 step 2: the walk back for a merge target passes assistants and tool-result user messages
    and stops at anything else."""
    return not isinstance(message, AssistantMessage) and not is_tool_result_message(message)


class MergeTargets:
    """For ``append_assistant``: where its walk back would stop, and the latest assistant of each
    ``message.id`` after that point, kept up to date as the fold appends. Each merge is then O(1)
    instead of a walk over the whole turn (tool-heavy turns made the fold quadratic)."""

    def __init__(self) -> None:
        self._start = 0
        """First index the walk back reaches (just after the latest stopper)."""
        self._by_id: dict[str, int] = {}
        self._valid = True

    def user_tail_changed(self, result: Sequence[ApiMessage], first_changed: int) -> None:
        """``result[first_changed:]`` was replaced or appended by user messages (merges, attachments)."""
        for index in range(len(result) - 1, first_changed - 1, -1):
            if _stops_merge_walk(result[index]):
                self._start, self._by_id, self._valid = index + 1, {}, True
                return
        if first_changed < self._start:
            # The stopper itself became a tool-result message: the walk now reaches further back.
            self._valid = False

    def target(self, result: Sequence[ApiMessage], message_id: str) -> int | None:
        if not self._valid:
            self._rescan(result)
        return self._by_id.get(message_id)

    def appended(self, index: int, message_id: str | None) -> None:
        if message_id is not None:
            self._by_id[message_id] = index

    def _rescan(self, result: Sequence[ApiMessage]) -> None:
        self._start, self._by_id = 0, {}
        for index in range(len(result) - 1, -1, -1):
            candidate = result[index]
            if isinstance(candidate, AssistantMessage):
                if candidate.message.id is not None:
                    self._by_id.setdefault(candidate.message.id, index)
            elif _stops_merge_walk(candidate):
                self._start = index + 1
                break
        self._valid = True


def append_assistant(result: list[ApiMessage], message: AssistantMessage, targets: MergeTargets) -> None:
    """R4.7 step 2: merge into the latest assistant with the same ``message.id``, walking back over
    tool-result user messages and assistants of other ids (streaming splits one response into one
    message per block, and parallel agents interleave); anything else stops the walk. A message
    without an id never merges (Claude Code's ids are always set). ``targets`` answers the walk."""
    message_id = message.message.id
    if message_id is not None and (index := targets.target(result, message_id)) is not None:
        candidate = result[index]
        if isinstance(candidate, AssistantMessage):
            result[index] = merge_assistant_messages(candidate, message)
            return
    targets.appended(len(result), message_id)
    result.append(message)


def fold_attachment(result: list[ApiMessage], attachment: AttachmentMessage, options: NormalizeOptions) -> Repairs:
    """R4.8: convert (R4.9; gate ``tengu_chair_sermon`` wraps every text in ``<system-reminder>``); after
    a user message fold each produced message into it (R4.11), else append them all unmerged."""
    produced, repairs = normalize_attachment_for_api(attachment)
    if options.chair_sermon:
        produced = [ensure_system_reminder_wrap(message) for message in produced]
    last = result[-1] if result else None
    if isinstance(last, UserMessage):
        for message in produced:
            last = merge_user_messages_and_tool_results(last, message, chair_sermon=options.chair_sermon)
        result[-1] = last
    else:
        result.extend(produced)
    return repairs


def ensure_system_reminder_wrap(message: UserMessage) -> UserMessage:
    """R4.8 (gated): every text not already starting with ``<system-reminder>`` gets wrapped (so the
    prefix reliably marks attachment-origin text for R4.18)."""
    content = message.message.content
    if isinstance(content, str):
        return (
            message
            if content.startswith(SYSTEM_REMINDER_OPEN)
            else with_user_content(message, wrap_in_system_reminder(content))
        )
    if all(not isinstance(block, TextBlock) or block.text.startswith(SYSTEM_REMINDER_OPEN) for block in content):
        return message
    return with_user_content(
        message,
        [
            block.model_copy(update={"text": wrap_in_system_reminder(block.text)})
            if isinstance(block, TextBlock) and not block.text.startswith(SYSTEM_REMINDER_OPEN)
            else block
            for block in content
        ],
    )


def fold_messages(
    messages: Sequence[ApiBound], options: NormalizeOptions, strip_targets: Mapping[str, frozenset[str]]
) -> PassResult:
    """R4.5–R4.8: the fold over the filtered list."""
    result: list[ApiMessage] = []
    repairs: Repairs = []
    targets = MergeTargets()
    for message in messages:
        # User-side steps change only the tail: the last message (a merge) or what they append.
        tail = max(len(result) - 1, 0)
        if isinstance(message, LocalCommandSystemMessage):
            _append_user(result, local_command_as_user(message), options)
        elif isinstance(message, UserMessage):
            folded, user_repairs = fold_user(message, options, strip_targets)
            repairs += user_repairs
            if folded is None:
                continue
            _append_user(result, folded, options)
        elif isinstance(message, AssistantMessage):
            normalized, tool_repairs = normalize_tool_uses(message, options)
            repairs += tool_repairs
            append_assistant(result, normalized, targets)
            continue
        else:
            repairs += fold_attachment(result, message, options)
        targets.user_tail_changed(result, tail)
    return result, repairs
