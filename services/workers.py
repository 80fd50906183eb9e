"""The four worker types and how to run one as a process (uvicorn serving its FastStream ASGI app)."""

from __future__ import annotations

import uvicorn

from services.ingestion import app as ingestion_app
from services.normalization import app as normalization_app
from services.observability.wiring import configure_process
from services.runtime.settings import Settings
from services.runtime.worker_app import WorkerFactory, WorkerProcess, build_app
from services.tool_execution import app as tools_app
from services.transcripts import app as transcripts_app

WORKER_FACTORIES: dict[str, WorkerFactory] = {
    "ingestion": ingestion_app.create,
    "tools": tools_app.create,
    "normalization": normalization_app.create,
    "transcripts": transcripts_app.create,
}
"""Every worker type by the name ``agentbus worker NAME`` takes."""


def build_worker(name: str, settings: Settings | None = None) -> tuple[object, WorkerProcess]:
    """The ASGI app and process object of worker ``name``."""
    if name not in WORKER_FACTORIES:
        msg = f"unknown worker {name!r}; choose one of {', '.join(WORKER_FACTORIES)}"
        raise ValueError(msg)
    return build_app(name, WORKER_FACTORIES[name], settings=settings)


def run_worker(name: str, settings: Settings | None = None, *, port: int | None = None) -> None:
    """Serve worker ``name`` until SIGTERM/SIGINT (graceful: the batch in hand is finished and acked)."""
    resolved = settings if settings is not None else Settings()
    configure_process(resolved, name)  # before any consumer binds its logger
    app, _ = build_worker(name, resolved)
    config = uvicorn.Config(
        app,  # type: ignore[arg-type]
        host="0.0.0.0",
        port=resolved.http_port if port is None else port,
        log_level=resolved.log_level.lower(),
        access_log=False,
        log_config=None,  # uvicorn's loggers propagate to the structlog-formatted root handler
        lifespan="on",
        loop="uvloop" if _has_uvloop() else "asyncio",
    )
    # Server.run honours the loop factory; asyncio.run(server.serve()) would silently run the stdlib loop.
    uvicorn.Server(config).run()


def _has_uvloop() -> bool:
    try:
        import uvloop  # noqa: F401
    except ImportError:
        return False
    return True
