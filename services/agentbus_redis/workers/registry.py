"""The five worker types and how to run one as a process (uvicorn serving its FastStream ASGI app)."""

from __future__ import annotations

import gc
import os
import socket
import sys

import uvicorn

from agentbus_redis.config.settings import Settings
from agentbus_redis.local.supervisor import LISTEN_FD_ENV, bind_listener
from agentbus_redis.observability.wiring import configure_process
from agentbus_redis.workers.model.api_key import require_api_key
from agentbus_redis.workers.process import WorkerContext, WorkerFactory, WorkerProcess, WorkerRuntime, build_app


def _ingestion(context: WorkerContext) -> WorkerRuntime:
    from agentbus_redis.workers.ingestion import app

    return app.create(context)


def _tools(context: WorkerContext) -> WorkerRuntime:
    from agentbus_redis.workers.tools import app

    return app.create(context)


def _normalization(context: WorkerContext) -> WorkerRuntime:
    from agentbus_redis.workers.normalization import app

    return app.create(context)


def _transcripts(context: WorkerContext) -> WorkerRuntime:
    from agentbus_redis.workers.transcripts import app

    return app.create(context)


def _model(context: WorkerContext) -> WorkerRuntime:
    from agentbus_redis.workers.model import app

    return app.create(context)


WORKER_FACTORIES: dict[str, WorkerFactory] = {
    "ingestion": _ingestion,
    "tools": _tools,
    "normalization": _normalization,
    "transcripts": _transcripts,
    "model": _model,
}
"""Every worker type by the name ``agentbus worker NAME`` takes. Each factory imports its worker's module
when called, so a process imports only the worker it runs (the ``anthropic`` SDK only in the model
worker, the sub-agent relay only in ingestion): a worker process starts that much sooner, and the
test suite starts some two hundred of them."""


SIGNING_WORKERS = frozenset({"ingestion", "tools", "model"})
"""The workers that sign or check internal events: they need ``AGENTBUS_INTERNAL_KEY``."""

LISTEN_BACKLOG = 2048
"""uvicorn's default backlog."""

GC_THRESHOLDS = (10_000, 10, 10)
"""``gc.set_threshold`` of a worker process (CPython's default: 700, 10, 10); see :func:`freeze_startup_heap`."""


def build_worker(name: str, settings: Settings | None = None) -> tuple[object, WorkerProcess]:
    """The ASGI app and process object of worker ``name``."""
    if name not in WORKER_FACTORIES:
        msg = f"unknown worker {name!r}; choose one of {', '.join(WORKER_FACTORIES)}"
        raise ValueError(msg)
    return build_app(name, WORKER_FACTORIES[name], settings=settings)


def run_worker(name: str, settings: Settings | None = None, *, port: int | None = None) -> None:
    """Serve worker ``name`` until SIGTERM/SIGINT (graceful: the batch in hand is finished and acked)."""
    resolved = settings if settings is not None else Settings()
    if name in SIGNING_WORKERS:
        resolved.require_internal_key()  # refuse here, in one line, not as a startup traceback in the log
    if name == "model":
        require_api_key(resolved)
    configure_process(resolved, name)  # before any consumer binds its logger
    app, _ = build_worker(name, resolved)
    listener = inherited_listener()
    if listener is None:
        requested = resolved.http_port if port is None else port
        listener = bind_http_port(resolved.http_host, requested)
        if requested == 0:  # say which port was picked: nothing else tells where /metrics is
            host, bound = listener.getsockname()[:2]
            sys.stderr.write(f"agentbus: worker {name}: /metrics, /healthz, /readyz on http://{host}:{bound}\n")
    config = uvicorn.Config(
        app,  # type: ignore[arg-type]
        host=resolved.http_host,
        port=listener.getsockname()[1],
        log_level=resolved.log_level.lower(),
        access_log=False,
        log_config=None,  # uvicorn's loggers propagate to the structlog-formatted root handler
        lifespan="on",
        loop="uvloop" if _has_uvloop() else "asyncio",
    )
    freeze_startup_heap()
    # Server.run honours the loop factory; asyncio.run(server.serve()) would silently run the stdlib loop.
    uvicorn.Server(config).run(sockets=[listener])


def inherited_listener() -> socket.socket | None:
    """The listening socket ``agentbus up`` bound and passed down (:data:`LISTEN_FD_ENV`; so its ``/readyz``
    answers for this process, whoever else holds ports, and a restart serves the same port), None when run
    on its own.

    The variable is removed so that the commands a tool worker runs do not inherit it.
    """
    fd = os.environ.pop(LISTEN_FD_ENV, None)
    return None if fd is None else socket.socket(fileno=int(fd))


def bind_http_port(host: str, port: int) -> socket.socket:
    """A socket listening on ``host:port`` (0: a free port), opened before the worker starts so the port it
    reports is the one it serves; a taken port fails here, naming it."""
    return bind_listener(host, port, inheritable=False, backlog=LISTEN_BACKLOG)


def freeze_startup_heap() -> None:
    """Tune the cyclic garbage collector for a long-running worker, once its startup is done.

    - Freeze what is alive after startup (modules, pydantic schemas, the app): those objects live as long
      as the process, yet every full collection traversed them again — at saturation ingestion spent
      ~0.25 s of CPU per 20k events in four full collections of ~60 ms (``gc.freeze``, as CPython's docs
      advise for long-running servers).
    - Collect the youngest generation every :data:`GC_THRESHOLDS` ``[0]`` net allocations instead of 700.
      A batch allocates many short-lived objects that refcounting frees anyway; each collection walks the
      young objects still alive (a batch's ledgers and messages), so with 700 the workers ran a hundred
      young collections per 1k events. Together: GC went from ~18% of the workers' CPU at saturation to
      ~2% (``bench/pipeline.py``, measured with ``gc.callbacks``), at the price of young collections of
      ~1–3 ms instead of ~0.1 ms.
    """
    gc.collect()
    gc.freeze()
    gc.set_threshold(*GC_THRESHOLDS)


def _has_uvloop() -> bool:
    try:
        import uvloop  # noqa: F401
    except ImportError:
        return False
    return True
