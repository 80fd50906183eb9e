"""/healthz and /readyz (ecosystem.md §4.3), through a real ``AsgiFastStream`` app and a real Redis."""

from __future__ import annotations

import asyncio
import importlib
from collections.abc import Sequence
from typing import Any

import orjson
import redis.asyncio as aioredis
from faststream.asgi import AsgiFastStream
from redis.exceptions import ResponseError

from agentbus_redis.observability.endpoints import observability_routes
from agentbus_redis.observability.health import Health


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


async def call(app: Any, path: str, method: str = "GET") -> tuple[int, dict[str, Any] | bytes, dict[bytes, bytes]]:
    """One HTTP request through the ASGI interface."""
    sent: list[dict[str, Any]] = []

    async def receive() -> dict[str, Any]:
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    scope = {"type": "http", "method": method, "path": path, "headers": [], "query_string": b""}
    await app(scope, receive, send)
    start, body = sent[0], sent[1]
    headers = {bytes(name).lower(): bytes(value) for name, value in start["headers"]}
    raw = body["body"]
    if headers.get(b"content-type") == b"application/json":
        return start["status"], orjson.loads(raw), headers
    return start["status"], raw, headers


def make_app(health: Health) -> AsgiFastStream:
    return AsgiFastStream(asgi_routes=observability_routes(health))


async def test_healthz_fails_when_a_loop_stops_progressing() -> None:
    clock = FakeClock()
    progress = {"ingress": 1000.0}
    health = Health(progress_timeout_s=30, clock=clock)
    health.register_loop("ingress", lambda: progress["ingress"])
    app = make_app(health)
    status, body, _ = await call(app, "/healthz")
    assert status == 200
    assert isinstance(body, dict)
    assert body["status"] == "ok"
    clock.now += 31
    status, body, _ = await call(app, "/healthz")
    assert status == 503
    assert isinstance(body, dict)
    assert body["checks"]["ingress"]["ok"] is False
    progress["ingress"] = clock.now
    assert (await call(app, "/healthz"))[0] == 200


async def test_healthz_fails_when_a_background_task_dies_but_not_while_draining() -> None:
    async def boom() -> None:
        raise RuntimeError("lease loop crashed")

    task = asyncio.create_task(boom())
    await asyncio.gather(task, return_exceptions=True)
    health = Health()
    health.register_task("leases", task)
    status, body, _ = await call(make_app(health), "/healthz")
    assert status == 503
    assert isinstance(body, dict)
    assert "lease loop crashed" in body["checks"]["task:leases"]["detail"]

    finished = asyncio.create_task(asyncio.sleep(0))
    await finished
    quiet = Health()
    quiet.register_task("poller", finished)
    assert (await call(make_app(quiet), "/healthz"))[0] == 503
    quiet.start_draining()
    assert (await call(make_app(quiet), "/healthz"))[0] == 200


async def test_healthz_fails_when_a_runtime_renew_loop_ended() -> None:
    """Issue 25: a runtime's renew loops (the tool catalog refresh, the lease loop) exist once it started; they are
    read per check, and one that ended fails /healthz (one not started yet is not checked)."""
    tasks: dict[str, asyncio.Task[None] | None] = {"tool_catalog": None}
    health = Health()
    health.register_task_source(lambda: tasks)
    assert (await call(make_app(health), "/healthz"))[0] == 200
    running = asyncio.create_task(asyncio.Event().wait())
    tasks["tool_catalog"] = running
    assert (await call(make_app(health), "/healthz"))[0] == 200
    running.cancel()
    await asyncio.gather(running, return_exceptions=True)
    status, body, _ = await call(make_app(health), "/healthz")
    assert status == 503
    assert isinstance(body, dict)
    assert body["checks"]["task:tool_catalog"]["ok"] is False


class Loop:
    """Stands for a ``BatchConsumer`` as the health checks see it."""

    def __init__(self, stream: str, last: float, failure: BaseException | None = None) -> None:
        self.stream = stream
        self.last_progress_monotonic = last
        self.failure = failure


async def test_healthz_checks_every_consumer_of_a_provider() -> None:
    clock = FakeClock()
    loops = [Loop("agentbus:{s00}:log", 1000.0), Loop("agentbus:{s01}:log", 900.0)]
    health = Health(progress_timeout_s=60, clock=clock)
    health.register_consumers("normalization", lambda: loops)  # type: ignore[arg-type, return-value]
    status, body, _ = await call(make_app(health), "/healthz")
    assert status == 503
    assert isinstance(body, dict)
    assert body["checks"]["normalization:agentbus:{s01}:log"]["ok"] is False
    assert body["checks"]["normalization:agentbus:{s00}:log"]["ok"] is True


async def test_healthz_fails_at_once_for_a_consumer_that_crashed() -> None:
    """A loop that died of an exception is not merely idle: liveness fails without waiting for the timeout."""
    clock = FakeClock()
    crashed = Loop("agentbus:{s00}:ingress", 1000.0, failure=ResponseError("NOPERM this user has no permissions"))
    health = Health(progress_timeout_s=60, clock=clock)
    health.register_consumers("ingestion", lambda: [crashed])  # type: ignore[arg-type, list-item]
    status, body, _ = await call(make_app(health), "/healthz")
    assert status == 503
    assert isinstance(body, dict)
    check = body["checks"]["ingestion:agentbus:{s00}:ingress"]
    assert check["ok"] is False
    assert "NOPERM" in check["detail"]


async def test_readyz_needs_redis_groups_and_not_draining(aredis: aioredis.Redis) -> None:
    pairs: Sequence[tuple[str, str]] = [("agentbus:{s00}:ingress", "ingestion"), ("agentbus:tools:jobs", "tools")]
    draining = {"flag": False}
    health = Health(redis=lambda: aredis, groups=lambda: pairs, draining_source=lambda: draining["flag"])
    app = make_app(health)
    status, body, _ = await call(app, "/readyz")
    assert status == 503
    assert isinstance(body, dict)
    assert body["checks"]["redis"]["ok"] is True
    assert "agentbus:{s00}:ingress/ingestion" in body["checks"]["groups"]["detail"]

    for stream, group in pairs:
        await aredis.xgroup_create(stream, group, id="0", mkstream=True)
    assert (await call(app, "/readyz"))[0] == 200

    draining["flag"] = True
    status, body, _ = await call(app, "/readyz")
    assert status == 503
    assert isinstance(body, dict)
    assert body["checks"]["draining"]["ok"] is False
    draining["flag"] = False
    health.start_draining()
    assert (await call(app, "/readyz"))[0] == 503


async def test_readyz_fails_without_redis() -> None:
    unreachable = aioredis.Redis(port=1, socket_connect_timeout=0.2)
    health = Health(redis=lambda: unreachable, ping_timeout_s=1.0)
    status, body, _ = await call(make_app(health), "/readyz")
    assert status == 503
    assert isinstance(body, dict)
    assert body["checks"]["redis"]["ok"] is False
    await unreachable.aclose()
    not_started = Health()
    assert (await call(make_app(not_started), "/readyz"))[0] == 503


async def test_metrics_route_serves_the_exposition() -> None:
    importlib.import_module("agentbus_redis.observability.metrics")  # registers agentbus_build_info, as workers do
    status, body, headers = await call(make_app(Health()), "/metrics")
    assert status == 200
    assert isinstance(body, bytes)
    assert b"agentbus_build_info" in body
    assert headers[b"content-type"].startswith(b"text/plain")


async def test_readyz_waits_for_the_startup_task_and_healthz_fails_if_it_failed(aredis: aioredis.Redis) -> None:
    """Issue 15: a worker started while Redis is down is not ready until its runtime started (and alive
    meanwhile); a startup that failed for another reason makes it not alive."""
    release = asyncio.Event()

    async def start_when_released() -> None:
        await release.wait()

    starting = asyncio.create_task(start_when_released())
    health = Health(redis=lambda: aredis, startup=lambda: starting)
    app = make_app(health)
    status, body, _ = await call(app, "/readyz")
    assert status == 503
    assert isinstance(body, dict)
    assert body["checks"]["started"] == {"ok": False, "detail": "waiting for Redis to answer"}
    assert (await call(app, "/healthz"))[0] == 200
    release.set()
    await starting
    assert (await call(app, "/readyz"))[0] == 200

    async def start_broken() -> None:
        raise RuntimeError("bad configuration")

    broken = asyncio.create_task(start_broken())
    await asyncio.wait([broken])
    health.startup = lambda: broken
    status, body, _ = await call(app, "/healthz")
    assert status == 503
    assert isinstance(body, dict)
    assert body["checks"]["startup"]["detail"] == "failed: RuntimeError: bad configuration"
