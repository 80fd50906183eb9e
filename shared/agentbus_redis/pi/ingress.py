"""A pi-shaped message published by a producer, mapped at the bus boundary into Claude Code's model (P10),
so that everything after ingestion sees one model (issue 17).

The mapping is the P10 line mapping of a one-entry session; what the Claude Code model has no field for
(pi's ``api``/``provider``, costs, ``details`` shapes…) is not carried onto the bus — a pi producer that needs
it losslessly keeps its own session file (``agentbus transcript convert`` maps files both ways).
"""

from __future__ import annotations

from agentbus_redis.messages.kinds import Message, parse_message
from agentbus_redis.pi.claude_code import STASH, ms_to_iso, session_to_claude_code
from agentbus_redis.pi.messages import PiMessage


def pi_message_to_claude_code(message: PiMessage, *, session_id: str, uuid: str, now: str) -> Message:
    """P10.1–P10.3: one pi message (user, assistant, toolResult, bashExecution, custom, …) as the Claude
    Code message with ``uuid``; a message without a timestamp is stamped ``now`` (ISO). A failed assistant
    (``error``/``aborted``) becomes a synthetic API error (R2.3c), which requests drop as pi does (P5.6 b)."""
    stamp = getattr(message, "timestamp", None)
    iso = ms_to_iso(stamp) if isinstance(stamp, int | float) else now
    entry = {"type": "message", "id": uuid, "parentId": None, "timestamp": iso, "message": message.to_wire()}
    header = {"type": "session", "id": session_id, "cwd": None}
    (line,) = session_to_claude_code(header, [entry])
    wire = {key: value for key, value in line.items() if key != STASH} | {"uuid": uuid, "sessionId": session_id}
    return parse_message(wire)
