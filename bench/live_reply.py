"""What the live reply stream (bus/live_reply.py) costs ingestion, as a ratio in one run.

    uv run python bench/live_reply.py [--rounds 8] [--sessions 40]

Streamed replies only (the worst case: every event a text delta; 1,200 characters per reply in deltas of
24) through one in-process ingestion consumer against a private redis-server, in alternating rounds with
the live deltas on and off (off: ``LiveDeltas.add`` collects nothing), at two batch sizes. Reports the
medians of ingestion CPU and Redis CPU (``INFO cpu``) per event and their on/off ratio.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import redis.asyncio as aioredis
import structlog

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from agentbus_redis.bus import live_reply
from agentbus_redis.bus.events import IngressEnvelope, IngressPayload, StreamEvent, UserPrompt
from agentbus_redis.bus.ingress_limits import DEFAULT_MAX_INGRESS_ENTRY_BYTES
from agentbus_redis.cli.local.demo import stream_events_for
from agentbus_redis.local.redis_server import start_local_redis
from agentbus_redis.messages.content import TextBlock
from agentbus_redis.runtime.codec import entry_fields
from agentbus_redis.runtime.consumer import BatchConsumer, ConsumerConfig
from agentbus_redis.streams.names import StreamNames
from agentbus_redis.streams.topology import INGESTION_GROUP, Topology
from agentbus_redis.workers.ingestion.worker import IngestionWorker

TOPOLOGY = Topology(StreamNames(prefix="bench:", shards=1))
REPLY_TEXT = "word " * 240
COLLECT: Callable[..., bool] = live_reply.LiveDeltas.add


def _collect_nothing(_deltas: live_reply.LiveDeltas, *_args: Any, **_kwargs: Any) -> bool:
    return False


async def _publish(redis: aioredis.Redis, sessions: int) -> int:
    pipe = redis.pipeline(transaction=False)
    count = 0
    for number in range(sessions):
        session = f"s{number}"
        payloads: list[IngressPayload] = [UserPrompt(content="hi")]
        events = stream_events_for([TextBlock(text=REPLY_TEXT)], message_id=f"msg_{number}", model="bench")
        payloads += [StreamEvent(request_id=f"req_{number}", event=event) for event in events]
        for payload in payloads:
            envelope = IngressEnvelope(session_id=session, idempotency_key=str(uuid.uuid4()), payload=payload)
            pipe.xadd(TOPOLOGY.ingress(0), entry_fields(envelope))  # type: ignore[arg-type]
            count += 1
    await pipe.execute()
    return count


async def _redis_cpu_s(redis: aioredis.Redis) -> float:
    info: Any = await redis.info("cpu")
    return float(info["used_cpu_sys"]) + float(info["used_cpu_user"])


async def one_round(redis: aioredis.Redis, *, live: bool, batch: int, sessions: int) -> tuple[float, float]:
    """(ingestion CPU µs per event, Redis CPU µs per event) of ingesting the sessions' replies once."""
    await redis.flushall()
    count = await _publish(redis, sessions)
    live_reply.LiveDeltas.add = COLLECT if live else _collect_nothing  # type: ignore[method-assign,assignment]
    worker = IngestionWorker(
        redis, TOPOLOGY, tool_deadline_ms=60_000, internal_key=b"bench", max_entry_bytes=DEFAULT_MAX_INGRESS_ENTRY_BYTES
    )
    config = ConsumerConfig(count=batch, block_ms=5, ordered=True, transactional=True)
    consumer = BatchConsumer(
        redis,
        stream=TOPOLOGY.ingress(0),
        group=INGESTION_GROUP,
        consumer="bench",
        handler=worker.handler_for(0, 1),
        config=config,
    )
    redis_before, cpu_before = await _redis_cpu_s(redis), time.process_time()
    consumer.start()
    while consumer.stats.acked < count:
        await asyncio.sleep(0.002)
    cpu, redis_cpu = time.process_time() - cpu_before, await _redis_cpu_s(redis) - redis_before
    await consumer.stop()
    live_reply.LiveDeltas.add = COLLECT  # type: ignore[method-assign]
    return cpu / count * 1e6, redis_cpu / count * 1e6


async def main(rounds: int, sessions: int) -> None:
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.WARNING))
    with tempfile.TemporaryDirectory() as root:
        server = start_local_redis(Path(root))
        redis = aioredis.Redis.from_url(server.url)
        try:
            for batch in (10, 200):
                results: dict[bool, list[tuple[float, float]]] = {True: [], False: []}
                for _ in range(rounds):
                    for live in (False, True):
                        results[live].append(await one_round(redis, live=live, batch=batch, sessions=sessions))
                for live in (False, True):
                    worker_us = statistics.median(r[0] for r in results[live])
                    redis_us = statistics.median(r[1] for r in results[live])
                    state = "on " if live else "off"
                    cost = f"ingestion {worker_us:6.1f} µs/event, redis {redis_us:5.1f} µs/event"
                    print(f"batch ≤{batch:>3} live {state}: {cost}")
                on = statistics.median(sum(r) for r in results[True])
                off = statistics.median(sum(r) for r in results[False])
                print(f"batch ≤{batch:>3} ratio on/off (ingestion + redis CPU): {on / off:.3f}")
        finally:
            await redis.aclose()
            server.stop()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=8)
    parser.add_argument("--sessions", type=int, default=40)
    arguments = parser.parse_args()
    asyncio.run(main(arguments.rounds, arguments.sessions))
