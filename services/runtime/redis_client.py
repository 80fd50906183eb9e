"""The Redis client of a worker process.

No per-command socket timeout. redis-py 8 defaults to 5 s, and with a timeout every command's send runs
in an ``asyncio.wait_for`` task and every reply read (each command of a pipeline, each ``QUEUED`` of a
transaction) under an asyncio timeout: ≈ 150 µs of CPU and two extra event-loop turns per awaited round
trip on this machine, a fifth of a worker's cost per batch at 1k events/s (redis-streams-baseline.md §8:
round trips dominate). A dead peer is detected by TCP instead, within ≈ 10 s:

- a Redis restart or a closed connection: reset / EOF at once (the consumers' reconnect path);
- a peer that vanished while a command is unacknowledged: ``TCP_USER_TIMEOUT`` (Linux);
- a peer that vanished while the connection is idle or waiting for a reply: keepalive probes.

Every blocking command the workers send is bounded server-side (``XREADGROUP BLOCK``), so a live Redis
always answers; a Redis that is alive but stuck shows up in the liveness check (consumer progress).
"""

from __future__ import annotations

import socket

import redis.asyncio as aioredis

HEALTH_CHECK_INTERVAL_S = 30
DEAD_PEER_TIMEOUT_MS = 10_000


def _tcp_options() -> dict[int, int]:
    """Keepalive after 5 s idle, then every 1 s, 5 probes; unacknowledged writes fail after 10 s."""
    wanted = {"TCP_KEEPIDLE": 5, "TCP_KEEPINTVL": 1, "TCP_KEEPCNT": 5, "TCP_USER_TIMEOUT": DEAD_PEER_TIMEOUT_MS}
    return {getattr(socket, name): value for name, value in wanted.items() if hasattr(socket, name)}


def worker_redis(url: str) -> aioredis.Redis:
    """A client for ``url`` tuned as described in the module docstring (returns bytes)."""
    return aioredis.Redis.from_url(
        url,
        health_check_interval=HEALTH_CHECK_INTERVAL_S,
        socket_timeout=None,
        socket_keepalive=True,
        socket_keepalive_options=_tcp_options(),
    )
