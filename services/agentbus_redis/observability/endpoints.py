"""The HTTP surface of a worker: ``/healthz``, ``/readyz`` and ``/metrics`` as ``AsgiFastStream`` routes.

FastStream's ``make_ping_asgi`` only pings the broker and cannot be extended (ecosystem.md §4.3), so a
worker mounts these instead::

    app = AsgiFastStream(broker, asgi_routes=observability_routes(health))

``/metrics`` is prometheus-client's ASGI app over the default registry (the ``agentbus_*`` metrics, the
registered collectors, and the process/platform collectors prometheus-client installs).
"""

from __future__ import annotations

from typing import Final

from faststream.asgi.types import ASGIApp
from prometheus_client import REGISTRY, make_asgi_app
from prometheus_client.registry import CollectorRegistry

from agentbus_redis.observability.health import Health, healthz_handler, readyz_handler

HEALTHZ_PATH: Final = "/healthz"
READYZ_PATH: Final = "/readyz"
METRICS_PATH: Final = "/metrics"


def metrics_app(registry: CollectorRegistry = REGISTRY) -> ASGIApp:
    """prometheus-client's ASGI exposition app (gzip when the scraper asks for it)."""
    app: ASGIApp = make_asgi_app(registry)
    return app


def observability_routes(health: Health, *, registry: CollectorRegistry = REGISTRY) -> list[tuple[str, ASGIApp]]:
    """The three routes, ready for ``AsgiFastStream(asgi_routes=...)``."""
    return [
        (HEALTHZ_PATH, healthz_handler(health)),
        (READYZ_PATH, readyz_handler(health)),
        (METRICS_PATH, metrics_app(registry)),
    ]
