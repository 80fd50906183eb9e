"""The normalizer's view of one session: its history, kept incrementally, and when to ask the model.

History is append-only (tombstones are appended too and applied by the normalization pipeline), so
applying a log entry is O(1); the API request is built only when the session is waiting for the model.
Entries are applied at most once, by their ``seq``: a redelivered entry is a no-op.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from agentbus_redis.bus.events import LogEntry
from agentbus_redis.bus.turn_state import answers_tools, is_interruption
from agentbus_redis.messages.content import ToolResultBlock, ToolUseBlock
from agentbus_redis.messages.kinds import AssistantMessage, AttachmentMessage, Message, TombstoneMessage, UserMessage
from agentbus_redis.model.limits.max_turns import is_max_turns_reached
from agentbus_redis.wire import field_or_none


@dataclass(slots=True)
class SessionHistory:
    """Messages of one session in log order, plus what was last published for it."""

    session_id: str
    messages: list[Message] = field(default_factory=list)
    applied_seq: int = 0
    published_seq: int = 0
    _retracted: set[str] = field(default_factory=set)
    _answered: set[str] = field(default_factory=set)
    _last_api_seq: int = 0
    _waiting: bool = False

    def apply(self, entry: LogEntry) -> bool:
        """Append ``entry`` unless it was applied already; True when it was new."""
        if entry.seq <= self.applied_seq:
            return False
        self.applied_seq = entry.seq
        message = entry.message
        self.messages.append(message)
        match message:
            case TombstoneMessage():
                uuid = field_or_none(message.message, "uuid")
                if isinstance(uuid, str):
                    self._retracted.add(uuid)
                self._waiting = self._compute_waiting()
                self._changed(entry)
            case UserMessage() | AssistantMessage() | AttachmentMessage():
                if isinstance(message, UserMessage):
                    self._answered.update(b.tool_use_id for b in message.blocks if isinstance(b, ToolResultBlock))
                self._waiting = self._compute_waiting()
                self._changed(entry)
            case _:
                pass
        return True

    def _changed(self, entry: LogEntry) -> None:
        """A message the API sees was logged: a reason to publish — unless it was replayed (a recording is
        history, never a live turn: the request it completes is published once a live entry follows)."""
        if not entry.replayed:
            self._last_api_seq = entry.seq

    def needs_request(self) -> bool:
        """Waiting for the model, and something changed since the last published request."""
        return self._waiting and self._last_api_seq > self.published_seq

    def mark_published(self) -> None:
        self.published_seq = self.applied_seq

    def _compute_waiting(self) -> bool:
        """The model is due after a new prompt, or once every call of the latest reply has its result
        (an interrupt notice ends the turn instead, and so does a ``max_turns_reached`` attachment: A3.8, the
        turn used its model calls).

        Walks back only over the latest reply: its lines share one ``message.id`` and may be interleaved
        with their tool results (R9.4 split replies), so the cost does not grow with the session.
        """
        last_user: UserMessage | None = None
        reply_id: str | None = None
        calls: list[str] = []
        for message in reversed(self.messages):
            if last_user is None and is_max_turns_reached(message):
                return False
            if isinstance(message, UserMessage):
                if last_user is None:
                    if is_interruption(message):
                        return False
                    if not answers_tools(message):
                        # A new prompt: the conversation moved on; pairing answers what is missing.
                        return True
                    last_user = message
                elif reply_id is not None and not answers_tools(message):
                    break
            elif isinstance(message, AssistantMessage) and message.uuid not in self._retracted:
                if last_user is None:
                    return False
                if reply_id is None:
                    reply_id = message.api_message_id or message.uuid
                elif (message.api_message_id or message.uuid) != reply_id:
                    break
                calls.extend(b.id for b in message.blocks if isinstance(b, ToolUseBlock))
        return last_user is not None and all(call in self._answered for call in calls)
