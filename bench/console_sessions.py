"""The console's sessions page with 100,000 sessions in Redis (issue 30): how long one page takes to answer,
over HTTP, from the console app served by uvicorn as ``agentbus worker console`` serves it.

    uv run python bench/console_sessions.py                      # 100k sessions, a private Redis
    uv run python bench/console_sessions.py --sessions 1000      # the same page with 1k: the time should match
    uv run python bench/console_sessions.py --redis-url redis://127.0.0.1:6379/0   # own prefix there; cleaned up

The sessions are written as ingestion writes them: each one's ledger (its state JSON), its score in its
shard's activity index, and its score in the console state index of its state (a few percent waiting for
the model, a tool or a person, some failed, most ended). Then, for each filter, the first page, a deep page
(the page after 50 pages, reached by following the cursors) and the search by id are requested repeatedly;
the median, p95 and max answer times are printed. The target is < 200 ms for every one.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import statistics
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path

import httpx
import redis.asyncio as aioredis
import uvicorn

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from agentbus_redis.bus.ledger import LedgerState, PendingToolUse
from agentbus_redis.config.settings import Settings
from agentbus_redis.console.app import build_console
from agentbus_redis.local.redis_server import free_port, start_local_redis
from agentbus_redis.streams.topology import Topology
from agentbus_redis.views.states import SESSION_FILTERS, session_state
from agentbus_redis.workers.ingestion.ledger_cache import dump_state

TOKEN = "bench-console-token"
PAGE = 50
TARGET_MS = 200.0


def ledger_of(index: int, session_id: str) -> LedgerState:
    """A spread of states: 2% wait for a tool, 3% for the model, 1% failed, the rest ended."""
    state = LedgerState(session_id=session_id, seq=10 + index % 40, last_progress_ms=1)
    bucket = index % 100
    if bucket < 2:
        state.pending["toolu_x"] = PendingToolUse(assistant_uuid="a", deadline_ms=2**41, name="Bash", dispatched=True)
        state.turn_open = True
    elif bucket < 5:
        state.awaiting_model = True
        state.turn_open = True
    elif bucket < 6:
        state.last_turn_failed = True
    return state


async def populate(url: str, topology: Topology, sessions: int) -> None:
    redis = aioredis.Redis.from_url(url)
    now = int(time.time() * 1000)
    batch = 5_000
    for start in range(0, sessions, batch):
        async with redis.pipeline(transaction=False) as pipe:
            for index in range(start, min(start + batch, sessions)):
                session_id = f"bench-{index:07d}-{uuid.uuid4().hex[:6]}"
                shard = topology.names.shard_of(session_id)
                state = ledger_of(index, session_id)
                at = now - index * 37  # spread over ~an hour: many pages, some ties between shards
                pipe.set(topology.ledger(session_id), dump_state(state))
                pipe.zadd(topology.sessions(shard), {session_id: at})
                pipe.zadd(topology.session_state_index(shard, session_state(state)), {session_id: at})
            await pipe.execute()
    await redis.aclose()


async def clean(url: str, prefix: str) -> None:
    redis = aioredis.Redis.from_url(url)
    async for key in redis.scan_iter(match=f"{prefix}*", count=5_000):
        await redis.unlink(key)
    await redis.aclose()


def serve(settings: Settings, port: int) -> uvicorn.Server:
    """The console app on ``port`` in a thread of this process, once it answers (both console benches)."""
    server = uvicorn.Server(
        uvicorn.Config(build_console(settings), host="127.0.0.1", port=port, log_level="warning", lifespan="on")
    )
    threading.Thread(target=server.run, daemon=True).start()
    deadline = time.monotonic() + 30
    while not server.started:
        if time.monotonic() > deadline:
            raise TimeoutError("the console did not start")
        time.sleep(0.05)
    return server


def timed(client: httpx.Client, path: str, repeat: int) -> tuple[list[float], dict[str, object]]:
    times, body = [], {}
    for _ in range(repeat):
        start = time.perf_counter()
        reply = client.get(path)
        times.append((time.perf_counter() - start) * 1000)
        reply.raise_for_status()
        body = reply.json()
    return times, body


def report(label: str, times: list[float]) -> bool:
    ordered = sorted(times)
    p95 = ordered[max(0, int(len(ordered) * 0.95) - 1)]
    ok = ordered[-1] < TARGET_MS
    print(
        f"{label:<38} median {statistics.median(ordered):6.1f} ms  p95 {p95:6.1f} ms  max {ordered[-1]:6.1f} ms"
        f"  {'ok' if ok else 'OVER ' + str(TARGET_MS) + ' ms'}"
    )
    return ok


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sessions", type=int, default=100_000)
    parser.add_argument("--repeat", type=int, default=30, help="requests per measured page")
    parser.add_argument("--redis-url", help="an existing Redis (own prefix, removed after); default: a private one")
    args = parser.parse_args()
    prefix = f"benchconsole{uuid.uuid4().hex[:6]}:"
    with contextlib.ExitStack() as stack:
        if args.redis_url:
            url = args.redis_url
        else:
            directory = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="console-bench-")))
            local = start_local_redis(directory, port=free_port(), appendonly=False)
            stack.callback(local.stop)
            url = local.url
        settings = Settings(
            _env_file=None,
            redis_url=url,
            prefix=prefix,
            console={"token": TOKEN},  # type: ignore[call-arg,arg-type]
        )
        topology = Topology(settings.names)
        started = time.perf_counter()
        asyncio.run(populate(url, topology, args.sessions))
        print(f"{args.sessions} sessions written in {time.perf_counter() - started:.1f} s ({settings.shards} shards)")
        server = serve(settings, port := free_port())
        ok = True
        try:
            with httpx.Client(
                base_url=f"http://127.0.0.1:{port}", headers={"Authorization": f"Bearer {TOKEN}"}
            ) as http:
                for name in SESSION_FILTERS:
                    times, body = timed(http, f"/api/sessions?state={name}&limit={PAGE}", args.repeat)
                    ok &= report(f"{name}: first page", times)
                    cursor = body.get("next")
                    for _ in range(50):
                        if not cursor:
                            break
                        body = http.get(f"/api/sessions?state={name}&limit={PAGE}&cursor={cursor}").json()
                        cursor = body.get("next")
                    if cursor:
                        times, _ = timed(http, f"/api/sessions?state={name}&limit={PAGE}&cursor={cursor}", args.repeat)
                        ok &= report(f"{name}: page 52", times)
                sample = http.get("/api/sessions?limit=1").json()["sessions"][0]["session_id"]
                times, _ = timed(http, f"/api/sessions?q={sample}", args.repeat)
                ok &= report("search by id", times)
        finally:
            server.should_exit = True
            asyncio.run(clean(url, prefix))
        return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
