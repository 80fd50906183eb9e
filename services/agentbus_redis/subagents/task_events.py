"""The relay's A6.3 SDK task events: built by ``agents/task_events.py``, published into the parent's
ingress as signed system notices (``SystemNotice``), each under a key derived from its uuid (published
twice, applied once).

``task_started`` goes out from the launch (``AgentTool``), before the child's prompt (a re-run launch
publishes it again: a duplicate); ``task_progress`` after each child message that ends with a tool_use (its
usage read from the child's log up to that message: one read per relayed batch); ``task_notification``
together with the parent call's result (``ChildRelay.answer_parent`` writes both in one script, so whoever
answers first also notifies: never a ``completed`` notification beside a rejection).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence

from agentbus_redis.agents.record import ChildRecord, ChildStatus
from agentbus_redis.agents.task_events import last_tool_use, task_notification, task_progress, task_started, task_usage
from agentbus_redis.agents.turn import live_messages
from agentbus_redis.bus.events import IngressEnvelope, LogEntry, SystemNotice
from agentbus_redis.clock import Clock
from agentbus_redis.messages.kinds import AssistantMessage
from agentbus_redis.messages.system import SystemMessageBase

Publish = Callable[[IngressEnvelope], Awaitable[None]]
ChildLog = Callable[[str, int | None], Awaitable[list[LogEntry]]]
"""``(child session id, up to seq or None) -> the child's log entries in order``."""


class TaskEvents:
    """Publishes one child's task events to its parent (see the module docstring)."""

    def __init__(self, publish: Publish, child_log: ChildLog, *, clock: Clock, now_ms: Callable[[], int]) -> None:
        self._publish = publish
        self._child_log = child_log
        self._clock = clock
        self._now_ms = now_ms

    def envelope(self, record: ChildRecord, message: SystemMessageBase) -> IngressEnvelope:
        return IngressEnvelope(
            session_id=record.parent_session_id,
            idempotency_key=f"agent_task:{message.uuid}",
            payload=SystemNotice(message=message),
        )

    async def started(self, record: ChildRecord) -> None:
        await self._publish(self.envelope(record, task_started(record, timestamp=self._clock())))

    async def progress(self, record: ChildRecord, entries: Sequence[LogEntry]) -> int:
        """``task_progress`` for every entry of ``entries`` whose message ends with a tool_use; how many."""
        ending = [(entry, tool) for entry in entries if (tool := last_tool_use(entry.message)) is not None]
        if not ending:
            return 0
        log = await self._child_log(record.session_id, max(entry.seq for entry, _ in ending))
        published = 0
        for entry, tool in ending:
            assert isinstance(entry.message, AssistantMessage)
            upto = live_messages(logged.message for logged in log if logged.seq <= entry.seq)
            usage = task_usage(upto, started_ms=record.started_ms, now_ms=self._now_ms())
            event = task_progress(record, entry.message, tool, usage=usage, timestamp=self._clock())
            await self._publish(self.envelope(record, event))
            published += 1
        return published

    async def notification(self, record: ChildRecord, status: ChildStatus) -> IngressEnvelope:
        """The ``task_notification`` of a child that ended with ``status`` (its usage from its whole log)."""
        messages = live_messages(entry.message for entry in await self._child_log(record.session_id, None))
        usage = task_usage(messages, started_ms=record.started_ms, now_ms=self._now_ms())
        return self.envelope(record, task_notification(record, status, usage=usage, timestamp=self._clock()))
