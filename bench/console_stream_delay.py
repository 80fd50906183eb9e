"""What the console adds to a streaming reply (issue 30: under 100 ms): the time from ingestion's write of a
live delta (the text a model just streamed) to its arrival at a browser's Server-Sent Events connection to
the session page.

    uv run python bench/console_stream_delay.py                 # 300 deltas, 20 ms apart, a private Redis
    uv run python bench/console_stream_delay.py --deltas 1000 --gap-ms 5

The deltas are written as ingestion writes them (``XADD`` to the session's live reply stream, the entry a
``LiveDelta``), each carrying its write time; an SSE client reads ``/api/sessions/S/events`` from the console
app served by uvicorn, as ``agentbus worker console`` serves it. Printed: median, p95 and max delay.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

import httpx
import redis.asyncio as aioredis

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from agentbus_redis.bus.live_reply import LiveDelta
from agentbus_redis.config.settings import Settings
from agentbus_redis.local.redis_server import free_port, start_local_redis
from agentbus_redis.runtime.codec import entry_fields
from agentbus_redis.streams.topology import Topology
from bench.console_sessions import serve

TOKEN = "bench-console-token"
SESSION = "bench-stream-delay"
TARGET_MS = 100.0


async def measure(url: str, topology: Topology, port: int, deltas: int, gap_ms: float) -> list[float]:
    redis = aioredis.Redis.from_url(url)
    delays: list[float] = []
    live = topology.live_reply(SESSION)
    headers = {"Authorization": f"Bearer {TOKEN}"}
    client = httpx.AsyncClient(base_url=f"http://127.0.0.1:{port}", headers=headers, timeout=None)
    async with client, client.stream("GET", f"/api/sessions/{SESSION}/events") as events:
        connected = asyncio.Event()

        async def read() -> None:
            async for line in events.aiter_lines():
                connected.set()
                if not line.startswith("data: "):
                    continue
                arrived = time.time_ns()
                for row in json.loads(line[6:]):
                    if row.get("kind") == "delta":
                        delays.append((arrived - int(row["text"])) / 1e6)
                if len(delays) >= deltas:
                    return

        reader = asyncio.create_task(read())
        await asyncio.wait_for(connected.wait(), 30)  # the first idle comment: the stream is being read
        for index in range(deltas):
            delta = LiveDelta(request_id="req_1", index=index, kind="text", text=str(time.time_ns()), after_seq=0)
            await redis.xadd(live, entry_fields(delta))  # type: ignore[arg-type]
            await asyncio.sleep(gap_ms / 1000)
        await asyncio.wait_for(reader, 60)
    await redis.aclose()
    return delays


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--deltas", type=int, default=300)
    parser.add_argument("--gap-ms", type=float, default=20.0)
    args = parser.parse_args()
    with contextlib.ExitStack() as stack:
        directory = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="console-bench-")))
        local = start_local_redis(directory, appendonly=False)
        stack.callback(local.stop)
        settings = Settings(_env_file=None, redis_url=local.url, console={"token": TOKEN})  # type: ignore[call-arg,arg-type]
        server = serve(settings, port := free_port())
        try:
            delays = sorted(asyncio.run(measure(local.url, Topology(settings.names), port, args.deltas, args.gap_ms)))
        finally:
            server.should_exit = True
    p95 = delays[max(0, int(len(delays) * 0.95) - 1)]
    print(
        f"{len(delays)} live deltas, XADD → SSE event at the client: median {statistics.median(delays):.1f} ms, "
        f"p95 {p95:.1f} ms, max {delays[-1]:.1f} ms ({'ok' if p95 < TARGET_MS else 'OVER'} {TARGET_MS:.0f} ms)"
    )
    return 0 if p95 < TARGET_MS else 1


if __name__ == "__main__":
    sys.exit(main())
