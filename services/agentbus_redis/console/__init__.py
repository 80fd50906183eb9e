"""The web console (``agentbus worker console``): sessions, a session's conversation as it streams, the
approvals queue, dead letters and the bus, over a token-guarded JSON and Server-Sent Events API."""

from __future__ import annotations

from agentbus_redis.console.app import Console, build_console

__all__ = ["Console", "build_console"]
