"""Internal events: ingress entries only the workers may write, and how ingestion tells them apart.

Producers (SDK, CLI, replay) and workers share the ingress streams, so the stream a producer can write
does not say who wrote an entry. Worker entries therefore carry an authenticator: the ``auth`` field of
the stream entry is an HMAC-SHA256 over the entry's exact ``data`` bytes (the canonical body, session
id and idempotency key included), keyed by the worker secret ``AGENTBUS_INTERNAL_KEY`` that ingestion
and the tool workers hold and producers do not. Rules enforced by ingestion on an entry without a valid
authenticator (each one dead-lettered as ``forged_internal_event``, never applied):

- an internal-only payload (``deadline_sweep``: the ingestion sweeper's tick; ``tool_job_abandoned``:
  the tool workers' placeholder request; ``approval_requested``: a tool worker parking calls for a person;
  a ``max_turns_reached`` attachment: the model worker ending a turn, A3.8; a sub-agent's SDK task event,
  A6.3: the relay's ``task_*`` system notices);
- a tool result or progress (live, recorded, or a pi ``toolResult``) for a call that was dispatched to the tool workers:
  only a tool worker answers such a call; a producer answers only the calls it said it would
  (``execute_tools=False``, e.g. the replay of a recorded session);
- an idempotency key in the workers' namespace (``internal:``): an authenticated entry's key is kept
  under that prefix, so a producer can never take a key a worker will use (which would get the real
  result dropped as a duplicate).

The same authenticator signs the ``approval_continuation`` jobs ingestion writes to the tool-jobs streams
(approvals/records.py): such a job runs a parked call without asking, so a tool worker dead-letters one
without a valid authenticator as ``forged_internal_event``.

Replaying a captured worker entry verbatim gains nothing: it is a duplicate of an applied key, or a
result for a call already answered.
"""

from __future__ import annotations

import hashlib
import hmac
from collections.abc import Iterable, Mapping

from agentbus_redis.approvals.records import ApprovalAnswer, ApprovalRequested
from agentbus_redis.bus.events import (
    AssistantReply,
    AttachmentNotice,
    DeadlineSweep,
    IngressEnvelope,
    Interrupt,
    PiMessagePayload,
    RecordedMessage,
    StreamEvent,
    StreamFallback,
    StuckTurnSweep,
    SystemNotice,
    ToolJobAbandoned,
    ToolProgressReport,
    ToolResultReport,
    UserPrompt,
)
from agentbus_redis.bus.ledger import PendingToolUse, tool_result_ids_of
from agentbus_redis.messages.kinds import Message, ProgressMessage, UserMessage
from agentbus_redis.messages.system import is_sdk_only
from agentbus_redis.model.limits.max_turns import is_max_turns_reached
from agentbus_redis.pi.messages import PiToolResultMessage
from agentbus_redis.wire import type_literal

AUTH_FIELD = "auth"
"""The stream-entry field beside ``data`` that carries a worker entry's authenticator (hex)."""

FORGED_INTERNAL_EVENT = "forged_internal_event"
"""The dead-letter reason of an entry that claims a worker's authority without proving it."""

INTERNAL_KEY_PREFIX = "internal:"
"""Applied idempotency keys of authenticated entries are kept under this prefix (a namespace producers
cannot write)."""

_DOMAIN = b"agentbus-internal-event-v1\n"
"""Binds the authenticator to this use of the key (and lets a later version change the format)."""


def internal_event_proof(key: bytes, data: bytes) -> bytes:
    """The authenticator of an ingress entry whose ``data`` field is ``data``."""
    return hmac.new(key, _DOMAIN + data, hashlib.sha256).hexdigest().encode("ascii")


def is_authentic(key: bytes, data: bytes, proof: bytes | None) -> bool:
    """True when ``proof`` is the authenticator of ``data`` under ``key`` (constant-time compare)."""
    return proof is not None and hmac.compare_digest(internal_event_proof(key, data), proof)


def idempotency_slot(key: str, *, authenticated: bool) -> str:
    """Where an entry's idempotency key is remembered: worker keys in their own namespace."""
    return INTERNAL_KEY_PREFIX + key if authenticated else key


_WORKER_ONLY_TYPES = frozenset(
    type_literal(model) for model in (DeadlineSweep, StuckTurnSweep, ToolJobAbandoned, ApprovalRequested)
)
"""Payloads only the workers write."""
_SYSTEM_NOTICE = type_literal(SystemNotice)
_ATTACHMENT_NOTICE = type_literal(AttachmentNotice)
_ANSWERING_TYPES = frozenset(
    type_literal(model) for model in (PiMessagePayload, ToolResultReport, ToolProgressReport, RecordedMessage)
)
"""Payloads that can answer a call (:func:`_answered_calls`)."""
_PLAIN_TYPES = frozenset(
    type_literal(model)
    for model in (UserPrompt, AssistantReply, StreamEvent, StreamFallback, Interrupt, ApprovalAnswer)
)
"""Payloads a producer may write whatever they hold: only their idempotency key is checked."""


def forged_internal_problem(envelope: IngressEnvelope, pending: Mapping[str, PendingToolUse]) -> str | None:
    """Why an entry WITHOUT a valid authenticator may not be applied (see the module docstring), given
    the session's calls still waiting for a result; None when a producer may write it."""
    payload = envelope.payload
    # Dispatched on the discriminator: a failing isinstance check against a pydantic model class goes through
    # ABCMeta's __instancecheck__ (~0.25 µs each), and this runs for every producer entry (~4 µs → ~0.5 µs).
    kind = payload.type
    if kind in _PLAIN_TYPES:  # most entries (stream events): only the key's namespace is the workers'
        return _internal_key_problem(envelope.idempotency_key)
    if kind in _WORKER_ONLY_TYPES:
        return f"{kind} is written only by agentbus workers, and this entry has no valid authenticator"
    if kind == _SYSTEM_NOTICE and isinstance(payload, SystemNotice) and is_sdk_only(payload.message):
        return "a task event (A6.3) is written only by agentbus workers, and this entry has no valid authenticator"
    if kind == _ATTACHMENT_NOTICE and isinstance(payload, AttachmentNotice) and is_max_turns_reached(payload.message):
        return (
            "a max_turns_reached attachment is written only by the model worker (A3.8), "
            "and this entry has no valid authenticator"
        )
    if (problem := _internal_key_problem(envelope.idempotency_key)) is not None:
        return problem
    if kind not in _ANSWERING_TYPES:
        return None
    answered = [i for i in _answered_calls(payload) if (p := pending.get(i)) is not None and p.dispatched]
    if answered:
        return (
            f"{kind} for tool_use {', '.join(answered)}, which was dispatched to the tool workers: "
            "only a tool worker answers it (producers answer calls sent with execute_tools=false)"
        )
    return None


def _internal_key_problem(key: str) -> str | None:
    """Why a producer may not use idempotency key ``key`` (it is in the workers' namespace), or None."""
    if key.startswith(INTERNAL_KEY_PREFIX):
        return f"idempotency key {key!r}: the {INTERNAL_KEY_PREFIX!r} namespace is the workers'"
    return None


def _answered_calls(payload: object) -> Iterable[str]:
    """The calls a result or progress payload speaks for (none for other payloads)."""
    message: Message | None = None
    if isinstance(payload, PiMessagePayload):  # a pi toolResult answers its call like a tool_result (P10.1)
        return [payload.message.tool_call_id] if isinstance(payload.message, PiToolResultMessage) else []
    if isinstance(payload, ToolResultReport | ToolProgressReport | RecordedMessage):
        message = payload.message
    if isinstance(message, UserMessage):
        return tool_result_ids_of(message)
    if isinstance(message, ProgressMessage):
        return [i for i in (message.tool_use_id, message.parent_tool_use_id) if i is not None]
    return []
