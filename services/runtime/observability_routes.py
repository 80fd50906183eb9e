"""HTTP routes of a worker process: ``/metrics``, ``/healthz``, ``/readyz``."""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

from faststream.asgi import AsgiResponse, get
from prometheus_client import make_asgi_app

from services.runtime.worker_app import WorkerProcess

HEARTBEAT_STALE_S = 60.0
"""A consume loop that has not completed a step for this long makes the process unhealthy."""


def worker_routes(process: WorkerProcess) -> Sequence[tuple[str, Any]]:
    @get
    async def healthz(scope: Any) -> AsgiResponse:
        runtime = process.runtime
        if runtime is None:
            return AsgiResponse(b"starting", status_code=503)
        now = time.monotonic()
        stale = [c.stream for c in runtime.consumers() if now - c.last_progress_monotonic > HEARTBEAT_STALE_S]
        if stale:
            return AsgiResponse(("stale consume loops: " + ", ".join(stale)).encode(), status_code=503)
        return AsgiResponse(b"ok", status_code=200)

    @get
    async def readyz(scope: Any) -> AsgiResponse:
        runtime, redis = process.runtime, process.redis
        if runtime is None or redis is None or process.draining:
            return AsgiResponse(b"not ready", status_code=503)
        try:
            await redis.ping()
            for stream, group in runtime.groups():
                groups = await redis.xinfo_groups(stream)
                if not any((g.get("name") or b"") in (group, group.encode()) for g in groups):
                    return AsgiResponse(f"missing group {group} on {stream}".encode(), status_code=503)
        except Exception as error:  # noqa: BLE001 - readiness reports any failure as not ready
            return AsgiResponse(f"redis: {error}".encode(), status_code=503)
        return AsgiResponse(b"ready", status_code=200)

    return [("/healthz", healthz), ("/readyz", readyz), ("/metrics", make_asgi_app())]
