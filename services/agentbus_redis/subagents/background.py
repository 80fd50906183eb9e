"""A background child's end (A5.4, A8.3): the ``<task-notification>`` to its parent, as a queued prompt.

The relay answers every child's end through ``ChildRelay.answer_parent``; for a background child (its call
was answered at launch, A5.3) that hands over to :func:`notify_parent`: the notification is published into
the parent's ingress as a signed ``UserPrompt`` with ``queued: true`` (ingestion logs it when the parent's
turn is over, which starts the parent's next turn; bus/queued_prompts.py), then the child is marked
ended. The idempotency key names the round's call (``task_notification:<tool_use_id>``): a task is
notified at most once, however often a relay or the sweep finds it ended.
"""

from __future__ import annotations

import uuid as uuid_module
from collections.abc import Awaitable, Callable, Sequence

import structlog

from agentbus_redis.agents.background import TASK_NOTIFICATION_ORIGIN, NotificationStatus, task_notification
from agentbus_redis.agents.record import ChildRecord, ChildStatus
from agentbus_redis.agents.results import ParentResult
from agentbus_redis.agents.turn import turn_outcome
from agentbus_redis.bus.events import IngressEnvelope, UserPrompt
from agentbus_redis.messages.kinds import Message

log = structlog.get_logger(__name__)

_NOTIFICATION_NAMESPACE = uuid_module.UUID("0c7f4a53-3b5e-4d0e-8f0e-5a1f2d7e9b44")

STATUS_OF: dict[ChildStatus, NotificationStatus] = {
    "completed": "completed",
    "failed": "failed",
    "interrupted": "killed",
    "killed": "killed",
}
"""A child's end as a notification status: an interrupted background child was stopped explicitly (its
parent's interrupt does not reach it, A8.3)."""


def error_text(result: ParentResult) -> str | None:
    """The message of an error result (``toolUseResult`` is ``Error: <message>``, R8.1)."""
    value = result.tool_use_result
    if result.is_error and isinstance(value, str):
        return value.removeprefix("Error: ")
    return None


def notification_envelope(
    record: ChildRecord,
    result: ParentResult,
    status: ChildStatus,
    child_log: Sequence[Message],
    *,
    now_ms: int,
) -> IngressEnvelope:
    """The queued prompt that tells the parent how its background child ended (A5.4)."""
    notified = STATUS_OF.get(status, "failed")
    outcome = turn_outcome(child_log, since_uuid=record.round_prompt_uuid)
    notification = task_notification(
        agent_id=record.agent_id,
        tool_use_id=record.parent_tool_use_id,
        description=record.description,
        output_file=record.output_file or "",
        status=notified,
        messages=outcome.messages,
        duration_ms=max(0, now_ms - record.started_ms),
        error=error_text(result) if notified == "failed" else None,
    )
    prompt_uuid = str(uuid_module.uuid5(_NOTIFICATION_NAMESPACE, record.parent_tool_use_id))
    return IngressEnvelope(
        session_id=record.parent_session_id,
        idempotency_key=f"task_notification:{record.parent_tool_use_id}",
        payload=UserPrompt(
            content=notification.render(), uuid=prompt_uuid, origin=dict(TASK_NOTIFICATION_ORIGIN), queued=True
        ),
    )


async def notify_parent(
    record: ChildRecord,
    result: ParentResult,
    status: ChildStatus,
    *,
    child_log: Callable[[str], Awaitable[list[Message]]],
    publish: Callable[[IngressEnvelope], Awaitable[None]],
    end: Callable[[ChildRecord, ChildStatus], Awaitable[bool]],
    now_ms: int,
) -> bool:
    """Publish the notification, then mark the child ended (``killed`` for an interrupted one)."""
    envelope = notification_envelope(record, result, status, await child_log(record.session_id), now_ms=now_ms)
    await publish(envelope)
    final: ChildStatus = "killed" if status == "interrupted" else status
    ended = await end(record, final)
    log.info(
        "agent_notified",
        parent_session_id=record.parent_session_id,
        child_session_id=record.session_id,
        agent_id=record.agent_id,
        status=final,
        first=ended,
    )
    return ended
