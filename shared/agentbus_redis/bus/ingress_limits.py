"""How large one ingress entry may be.

The default is the Messages API's request limit (32 MB, agent-loop.md M1.9: larger requests are
refused with 413 ``request_too_large`` before they reach the API servers): an entry larger than a
whole request can never be sent to the model, and every byte of it would be stored three times
(ingress, the shard log, the session's event stream) before that became clear.
"""

from __future__ import annotations

from agentbus_redis.errors import AgentbusError

DEFAULT_MAX_INGRESS_ENTRY_BYTES = 32 * 1024 * 1024
TOO_LARGE = "too_large"
"""The dead-letter reason of an ingress entry over the limit."""


class IngressEntryTooLarge(AgentbusError, ValueError):
    """An ingress entry over the configured limit; ``size`` and ``limit`` in bytes."""

    def __init__(self, session_id: str, size: int, limit: int) -> None:
        super().__init__(f"session {session_id}: ingress entry of {size} bytes is over the limit of {limit} bytes")
        self.session_id = session_id
        self.size = size
        self.limit = limit


def entry_size_problem(size: int, limit: int) -> str | None:
    """Why an entry body of ``size`` bytes may not enter the bus, or None when it fits."""
    if size > limit:
        return f"entry of {size} bytes is over the limit of {limit} bytes (AGENTBUS_MAX_INGRESS_ENTRY_BYTES)"
    return None
