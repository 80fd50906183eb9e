"""One turn of a conversation as a watcher sees it: typed events, and the rules that say when the turn ends.

:class:`TurnTracker` is fed, in order, the session's log entries and its live text deltas
(bus/live_reply.py) from the user's prompt on, and turns them into :data:`ConversationEvent` values:
text and thinking as it streams, each finished assistant message, tool calls, their progress and results,
API retries and errors, retractions, the interrupt, its sub-agents' task events (A6.3), and the turn's end.
It does no I/O (``sdk/conversation.py`` reads Redis and feeds it).

When the model's turn ends (the loop of agent-loop.md §M, one model reply after another until no tool
call is left):
- a model reply is complete when an assistant message carries a ``stop_reason`` (streamed replies: the
  last block's message, R9.5; whole replies: the message itself); the turn ends at a complete reply once
  no tool call of the turn is waiting for its result — never earlier (calls of a reply whose
  ``stop_reason`` is ``max_tokens`` still run, M8.5);
- an API error assistant message (M7: the worker gave up, or the R9.5 ``max_tokens`` / ``refusal`` /
  context-window texts) ends it the same way (M7.4: after an API error the loop ends the turn);
- the interrupt texts (R10.1 ``[Request interrupted by user]``, R10.2 ``… for tool use``) end it;
- a ``max_turns_reached`` attachment (A3.8 / R10.6: the session's ``max_turns`` calls were used, the last
  reply's tools ran, no further call is made) ends it with ``stop_reason`` ``max_turns``.

Text is exact even when deltas were missed: a block's logged message carries its whole text, and what the
deltas did not show is yielded as one more delta when it is logged (late deltas of a finished block are
dropped). Everything logged before the prompt (an earlier turn) is ignored.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field, TypeAdapter

from agentbus_redis.bus.events import LogEntry
from agentbus_redis.bus.live_reply import LiveDelta
from agentbus_redis.json_types import JsonObject, JsonValue
from agentbus_redis.messages.constants import INTERRUPT_MESSAGE, INTERRUPT_MESSAGE_FOR_TOOL_USE
from agentbus_redis.messages.content import TextBlock, ThinkingBlock, ToolResultBlock, ToolUseBlock
from agentbus_redis.messages.kinds import AssistantMessage, ProgressMessage, TombstoneMessage, UserMessage
from agentbus_redis.messages.system import (
    ApiErrorSystemMessage,
    InformationalSystemMessage,
    TaskNotificationSystemMessage,
    TaskProgressSystemMessage,
    TaskStartedSystemMessage,
    TaskSystemMessage,
)
from agentbus_redis.model.limits.max_turns import is_max_turns_reached
from agentbus_redis.wire import WireModel, field_or_none

SUMMARY_CHARS = 80
"""A tool call's input summary and a result's first line are cut to about this many characters."""

CUT_OFF_STOP_REASONS = frozenset({"max_tokens", "refusal", "model_context_window_exceeded"})
"""R9.5: stop reasons whose reply is followed by an API error message of the accumulator's."""

INTERRUPT_TEXTS = frozenset({INTERRUPT_MESSAGE, INTERRUPT_MESSAGE_FOR_TOOL_USE})

_SUMMARY_KEYS = ("file_path", "path", "pattern", "command", "url", "query", "description", "prompt")
"""Which input field names a call in its one-line summary, first found wins (as Claude Code's tool lines)."""


class TextDelta(WireModel):
    """Reply text, in order; concatenating every delta of a block gives the block's text exactly."""

    type: Literal["text_delta"] = "text_delta"
    text: str


class ThinkingDelta(WireModel):
    """Thinking text (extended thinking), in order."""

    type: Literal["thinking_delta"] = "thinking_delta"
    text: str


class AssistantMessageComplete(WireModel):
    """One assistant message was logged (one content block of a streamed reply, R9.4, or a whole reply)."""

    type: Literal["assistant_message"] = "assistant_message"
    uuid: str
    message_id: str | None
    text: str
    """The text of its text blocks (empty for a thinking or tool_use block)."""
    stop_reason: str | None
    """Set on the message that completes a reply (R9.5)."""


class ToolCall(WireModel):
    """The model asked for a tool call."""

    type: Literal["tool_call"] = "tool_call"
    tool_use_id: str
    name: str
    input: JsonValue
    summary: str
    """The call's main argument in one line (``README.md`` of ``Read(README.md)``)."""


class ToolProgress(WireModel):
    """A running tool reported progress (R8.3)."""

    type: Literal["tool_progress"] = "tool_progress"
    tool_use_id: str | None
    kind: str
    """The progress ``data.type`` (``bash_progress`` …)."""
    line: str
    """The last line of output it reported, if any."""


class ToolResult(WireModel):
    """A tool call got its result (R8.1): from a tool worker, a denial, a timeout or a placeholder."""

    type: Literal["tool_result"] = "tool_result"
    tool_use_id: str
    name: str | None
    ok: bool
    first_line: str


class ApiRetry(WireModel):
    """The model call failed and is retried (an ``api_error`` system message, M4)."""

    type: Literal["api_retry"] = "api_retry"
    text: str
    retry_in_ms: float | None
    attempt: int | None
    max_retries: int | None


class Notice(WireModel):
    """An informational system message for the user (e.g. M6's switch to the fallback model)."""

    type: Literal["notice"] = "notice"
    text: str
    level: str | None


class ApiError(WireModel):
    """A synthetic API error assistant message (M7): the text the user sees."""

    type: Literal["api_error"] = "api_error"
    text: str
    error: JsonValue
    """Its SDK category (``rate_limit``, ``max_output_tokens`` …), when it has one."""


class Retracted(WireModel):
    """A message already shown was withdrawn (a failed stream's partial reply, R6.1); a retry follows."""

    type: Literal["retracted"] = "retracted"
    uuid: str | None


class Interrupted(WireModel):
    """The user interrupted the turn (R10.1 / R10.2)."""

    type: Literal["interrupted"] = "interrupted"
    text: str


class TaskStarted(WireModel):
    """A6.3: a sub-agent of this session started (its ``task_started`` SDK event); a UI opens its panel."""

    type: Literal["task_started"] = "task_started"
    task_id: str
    """The child's agentId."""
    tool_use_id: str
    """The Agent call that started it."""
    description: str
    task_type: str
    prompt: str


class TaskProgress(WireModel):
    """A6.3: the sub-agent's message ended with a tool call (``task_progress``)."""

    type: Literal["task_progress"] = "task_progress"
    task_id: str
    tool_use_id: str
    description: str
    usage: JsonObject
    """``{total_tokens, tool_uses, duration_ms}``."""
    last_tool_name: str


class TaskNotification(WireModel):
    """A6.3: the sub-agent finished (``task_notification``); its result reaches the Agent call as a
    :class:`ToolResult`."""

    type: Literal["task_notification"] = "task_notification"
    task_id: str
    tool_use_id: str
    status: str
    """``completed``, ``failed`` or ``stopped``."""
    summary: str
    usage: JsonObject


class TurnEnd(WireModel):
    """The model's turn is over; always the last event."""

    type: Literal["turn_end"] = "turn_end"
    stop_reason: str
    """The last reply's ``stop_reason`` (``end_turn``, ``stop_sequence``, ``max_tokens``, ``refusal`` …),
    ``api_error`` when the model call gave up (M7), ``interrupted``, or ``max_turns`` (A3.8)."""
    error: str | None = None
    """The API error text the turn ended with, if any."""
    usage: JsonObject | None = None
    """The last model reply's usage (input, output, cache tokens), when one was logged."""
    replies: int = 0
    """Complete model replies in this turn."""


ConversationEvent = Annotated[
    TextDelta
    | ThinkingDelta
    | AssistantMessageComplete
    | ToolCall
    | ToolProgress
    | ToolResult
    | ApiRetry
    | Notice
    | ApiError
    | Retracted
    | Interrupted
    | TaskStarted
    | TaskProgress
    | TaskNotification
    | TurnEnd,
    Field(discriminator="type"),
]
CONVERSATION_EVENT_ADAPTER: TypeAdapter[ConversationEvent] = TypeAdapter(ConversationEvent)


def one_line(text: str, limit: int = SUMMARY_CHARS) -> str:
    """The first non-blank line of ``text``, cut to ``limit`` characters."""
    line = next((line.strip() for line in text.splitlines() if line.strip()), "")
    return line if len(line) <= limit else line[: limit - 1] + "…"


def input_summary(tool_input: JsonValue) -> str:
    """The main argument of a call in one line (see :data:`_SUMMARY_KEYS`), else its first string value."""
    if not isinstance(tool_input, dict):
        return ""
    for key in (*_SUMMARY_KEYS, *tool_input):
        value = tool_input.get(key)
        if isinstance(value, str) and value.strip():
            return one_line(value)
    return ""


def retry_text(error: JsonValue) -> str:
    """One line for a retried API error (M4.4 notice): ``API error 529: Overloaded``."""
    if isinstance(error, dict):
        status, message = error.get("status"), error.get("message")
        label = f"API error {status}" if status is not None else "API error"
        return f"{label}: {one_line(message)}" if isinstance(message, str) and message.strip() else label
    return "API error"


def result_text(block: ToolResultBlock) -> str:
    content = block.content
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(part.text for part in content if isinstance(part, TextBlock))
    return ""


def task_event(message: TaskSystemMessage) -> ConversationEvent:
    """A6.3: a sub-agent's SDK task event as the conversation's typed event."""
    ids = {"task_id": message.task_id, "tool_use_id": message.task_tool_use_id}
    if isinstance(message, TaskStartedSystemMessage):
        return TaskStarted(**ids, description=message.description, task_type=message.task_type, prompt=message.prompt)
    if isinstance(message, TaskProgressSystemMessage):
        return TaskProgress(
            **ids, description=message.description, usage=message.usage, last_tool_name=message.last_tool_name
        )
    return TaskNotification(**ids, status=message.status, summary=message.summary, usage=message.usage)


class TurnTracker:
    """Turns one turn's log entries and live deltas into events (see the module docstring).

    ``prompt_ingress_id`` is the ingress entry id of the prompt that starts the turn: entries before its
    log entry (``LogEntry.ingress_id``) belong to earlier turns. ``prompt_uuid``, when the producer set the
    prompt's uuid, also recognises its log entry: a publish retried across a Redis restart may have landed
    under an entry id other than the one returned (the retry was a duplicate, dropped).
    """

    def __init__(self, prompt_ingress_id: str, *, prompt_uuid: str | None = None) -> None:
        self.prompt_ingress_id = prompt_ingress_id
        self.prompt_uuid = prompt_uuid
        self.started = False
        self.replies = 0
        self.pending: dict[str, str] = {}
        """Tool calls of the turn without a result: tool_use id → tool name."""
        self.names: dict[str, str] = {}
        self.end: TurnEnd | None = None
        """Set once the turn has ended (more already-written entries may still add an API error)."""
        self._streamed: dict[tuple[str, int], str] = {}
        self._finished_blocks: set[tuple[str, int]] = set()
        self._logged_blocks: dict[str, int] = {}
        self._last_stop: str | None = None
        self._last_usage: JsonObject | None = None

    @property
    def waiting_for(self) -> str:
        """What the turn waits for now, in words (for a timeout's message)."""
        if not self.started:
            return "the prompt to be logged (is ingestion running?)"
        if self.pending:
            return f"{len(self.pending)} tool result(s) ({', '.join(sorted(set(self.pending.values())))})"
        return "the model's reply (is a model worker running?)"

    def on_live(self, delta: LiveDelta) -> list[ConversationEvent]:
        if not self.started or self.end is not None:
            return []
        key = (delta.request_id, delta.index)
        if key in self._finished_blocks:
            return []  # its message was logged first; its text was yielded then
        self._streamed[key] = self._streamed.get(key, "") + delta.text
        return [TextDelta(text=delta.text) if delta.kind == "text" else ThinkingDelta(text=delta.text)]

    def on_log(self, entry: LogEntry) -> list[ConversationEvent]:
        message = entry.message
        if not self.started:
            self.started = entry.ingress_id == self.prompt_ingress_id or (
                self.prompt_uuid is not None and field_or_none(message, "uuid") == self.prompt_uuid
            )
            return []
        if self.end is not None:
            return self._after_end(message)
        if isinstance(message, AssistantMessage):
            return self._on_assistant(message)
        if isinstance(message, UserMessage):
            return self._on_user(message)
        if isinstance(message, ProgressMessage):
            output = message.data.get("output")
            return [
                ToolProgress(
                    tool_use_id=message.parent_tool_use_id or message.tool_use_id,
                    kind=str(message.data.get("type", "")),
                    line=one_line(output.splitlines()[-1] if isinstance(output, str) and output.strip() else ""),
                )
            ]
        if isinstance(message, TombstoneMessage):
            return self._on_tombstone(message)
        if is_max_turns_reached(message) and not self.pending:
            self.end = TurnEnd(stop_reason="max_turns", usage=self._last_usage, replies=self.replies)
            return []
        if isinstance(message, TaskStartedSystemMessage | TaskProgressSystemMessage | TaskNotificationSystemMessage):
            return [task_event(message)]
        if isinstance(message, InformationalSystemMessage) and message.content:
            return [Notice(text=message.content, level=message.level)]
        if isinstance(message, ApiErrorSystemMessage):
            return [
                ApiRetry(
                    text=message.content or retry_text(message.error),
                    retry_in_ms=message.retry_in_ms,
                    attempt=message.retry_attempt,
                    max_retries=message.max_retries,
                )
            ]
        return []

    def _after_end(self, message: object) -> list[ConversationEvent]:
        """Only the API error of a cut-off reply (R9.5, logged with it) still belongs to an ended turn."""
        end = self.end
        assert end is not None
        if isinstance(message, AssistantMessage) and message.is_api_error_message and end.error is None:
            error = self._api_error(message)
            self.end = end.model_copy(update={"error": error.text})
            return [error]
        return []

    def _api_error(self, message: AssistantMessage) -> ApiError:
        text = "".join(block.text for block in message.blocks if isinstance(block, TextBlock))
        return ApiError(text=text, error=message.error)

    def _on_assistant(self, message: AssistantMessage) -> list[ConversationEvent]:
        if message.is_api_error_message:
            error = self._api_error(message)
            after_cut_off = self._last_stop in CUT_OFF_STOP_REASONS
            self._end_if_idle(self._last_stop if after_cut_off and self._last_stop else "api_error", error.text)
            return [error]
        events: list[ConversationEvent] = []
        block_key = self._block_key(message)
        for block in message.blocks:
            if isinstance(block, TextBlock | ThinkingBlock):
                events += self._rest_of_text(block, block_key)
            elif isinstance(block, ToolUseBlock):
                self.pending[block.id] = block.name
                self.names[block.id] = block.name
                events.append(
                    ToolCall(
                        tool_use_id=block.id, name=block.name, input=block.input, summary=input_summary(block.input)
                    )
                )
        if block_key is not None:
            self._finished_blocks.add(block_key)
        stop_reason = message.message.stop_reason
        events.append(
            AssistantMessageComplete(
                uuid=message.uuid,
                message_id=message.api_message_id,
                text="".join(block.text for block in message.blocks if isinstance(block, TextBlock)),
                stop_reason=stop_reason,
            )
        )
        if stop_reason is not None:
            self.replies += 1
            self._last_stop = stop_reason
            self._last_usage = dict(message.message.usage) if isinstance(message.message.usage, dict) else None
            # A streamed cut-off reply's API error is logged after it, at message_stop (R9.5): the turn ends
            # there. A whole reply carries no such promise: it ends the turn itself.
            if not (stop_reason in CUT_OFF_STOP_REASONS and message.request_id is not None):
                self._end_if_idle(stop_reason, None)
        return events

    def _block_key(self, message: AssistantMessage) -> tuple[str, int] | None:
        """(request id, block index) of a streamed block's message: a reply's blocks are logged in index
        order, one message each (R9.4); None for a whole (non-streamed) reply."""
        if message.request_id is None:
            return None
        index = self._logged_blocks.get(message.request_id, 0)
        self._logged_blocks[message.request_id] = index + 1
        return (message.request_id, index)

    def _rest_of_text(self, block: TextBlock | ThinkingBlock, key: tuple[str, int] | None) -> list[ConversationEvent]:
        """What of the block's text the live deltas did not show (all of it for a whole reply)."""
        full = block.text if isinstance(block, TextBlock) else block.thinking
        shown = self._streamed.pop(key, "") if key is not None else ""
        rest = full[len(shown) :] if full.startswith(shown) else ""
        if not rest:
            return []
        return [TextDelta(text=rest) if isinstance(block, TextBlock) else ThinkingDelta(text=rest)]

    def _on_user(self, message: UserMessage) -> list[ConversationEvent]:
        events: list[ConversationEvent] = []
        for block in message.blocks:
            if isinstance(block, ToolResultBlock):
                self.pending.pop(block.tool_use_id, None)
                events.append(
                    ToolResult(
                        tool_use_id=block.tool_use_id,
                        name=self.names.get(block.tool_use_id),
                        ok=not block.is_error,
                        first_line=one_line(result_text(block)) or "(no output)",
                    )
                )
            elif isinstance(block, TextBlock) and block.text in INTERRUPT_TEXTS:
                events.append(Interrupted(text=block.text))
                self.end = TurnEnd(stop_reason="interrupted", usage=self._last_usage, replies=self.replies)
        return events

    def _on_tombstone(self, message: TombstoneMessage) -> list[ConversationEvent]:
        retracted = message.message
        if isinstance(retracted, AssistantMessage):
            for block in retracted.blocks:
                if isinstance(block, ToolUseBlock):
                    self.pending.pop(block.id, None)  # a retracted call never runs
            request_id = retracted.request_id
            if request_id is not None:  # a retry under the same request id starts again at block 0
                self._logged_blocks.pop(request_id, None)
                self._finished_blocks = {key for key in self._finished_blocks if key[0] != request_id}
                self._streamed = {key: text for key, text in self._streamed.items() if key[0] != request_id}
        return [Retracted(uuid=field_or_none(retracted, "uuid"))]

    def close_interrupted(self) -> None:
        """End the turn as interrupted: the interrupt was applied and logged no text — its reason was
        ``interrupt`` (a new message follows), or the session was idle (bus/turn_state.py). A model call in
        flight is aborted; its reply would be dropped."""
        self.end = TurnEnd(stop_reason="interrupted", usage=self._last_usage, replies=self.replies)

    def _end_if_idle(self, stop_reason: str, error: str | None) -> None:
        if not self.pending:
            self.end = TurnEnd(stop_reason=stop_reason, error=error, usage=self._last_usage, replies=self.replies)
