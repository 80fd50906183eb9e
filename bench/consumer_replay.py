r"""The shared consumer runtime's own CPU per event, on a real Redis: read → handle → settle (issue 31).

    uv run python bench/consumer_replay.py [--events 8000] [--batch 100] [--shards 2]
    uv run python bench/instructions.py --sizes 2000 8000 -- bench/consumer_replay.py --events {}
    uv run python bench/instructions.py --sizes 2000 8000 --tree /work/wt/base -- \
        /work/wt/runtime/bench/consumer_replay.py --events {}

Every pipeline worker (ingestion, normalization, transcripts) runs its shards on ``BatchConsumer`` as a shard
lane runs it: ordered, fenced by a lease epoch, each batch settled by one atomic script with its XACK and the
next fenced read in the same packet. This bench runs that REAL loop on a private redis-server over ``--events``
ingress entries spread over ``--shards`` shard streams (the turns mix of ``bench/pipeline.py``, signed as
ingestion's ingress is), with a handler that does next to nothing but returns what ingestion's does in shape:
two outputs per entry (the session's log and its events stream, the latter with ``MAXLEN ~``), a few state
writes through the ``write`` callback (a ``SET`` per session of the batch, a ``SADD`` of its entry ids), every
entry acked. So what the process spends per event is the runtime's: decoding the replies into ``StreamEntry``,
batching, fencing, building, packing and sending the settle script, reading its reply.

The streams are filled by one server-side script from a fixed set of entry templates (its client cost does not
grow with ``--events``), so ``bench/instructions.py`` at two sizes gives the consumer's instructions per event.
It imports the checkout it runs in (the working directory first on ``sys.path``): run with ``--tree`` it prices
that checkout's runtime.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import time
from dataclasses import replace
from pathlib import Path

sys.path.insert(0, str(Path.cwd()))  # the checkout it runs in, not necessarily this file's (see the docstring)

from agentbus_redis.local.redis_server import start_local_redis
from agentbus_redis.observability.logging import configure_logging
from agentbus_redis.runtime.codec import DATA_FIELD, signed_entry_fields
from agentbus_redis.runtime.consumer import BatchConsumer, BatchOutcome, ConsumerConfig, Fence, Output
from agentbus_redis.runtime.key_calls import Arg, KeyCalls, ServerScript
from agentbus_redis.runtime.redis_client import worker_redis
from agentbus_redis.streams.entries import StreamEntry
from agentbus_redis.workers.registry import freeze_startup_heap
from bench.pipeline import turn_workload

GROUP = "bench"
PREFIX = "bench:"
TEMPLATE_SESSIONS = 10
"""Distinct entries to cycle through: whole turns of this many sessions (22 entries each)."""
SESSIONS_PER_BATCH = 5
"""Sessions a batch's state writes touch (ingestion writes a ledger per session of a batch)."""
EVENTS_MAXLEN = 10_000

_FILL = ServerScript("""
local n = tonumber(ARGV[1])
local templates = (#ARGV - 1) / 2
for i = 0, n - 1 do
  local t = i % templates
  redis.call('XADD', KEYS[(i % #KEYS) + 1], '*', 'data', ARGV[2 + 2 * t], 'auth', ARGV[3 + 2 * t])
end
return n
""")
"""XADD ``ARGV[1]`` entries round-robin over ``KEYS``, cycling through the templates (data, auth) in ``ARGV``."""


def templates() -> list[bytes]:
    """(data, auth) of the turns mix's ingress entries, flat: what the fill script cycles through."""
    flat: list[bytes] = []
    for _, envelope in turn_workload(TEMPLATE_SESSIONS * 22, TEMPLATE_SESSIONS):
        fields = signed_entry_fields(envelope, b"k" * 32)
        flat += [fields[DATA_FIELD], fields["auth"]]
    return flat


def handler_for(shard: int, done: asyncio.Event, totals: list[int], events: int):  # type: ignore[no-untyped-def]
    """A handler as small as a handler gets, returning what ingestion's returns in shape (module docstring)."""
    log_stream = f"{PREFIX}log:{{{shard}}}"
    events_stream = f"{PREFIX}events:{{{shard}}}"
    seen_key = f"{PREFIX}seen:{{{shard}}}"

    async def handle(entries: list[StreamEntry]) -> BatchOutcome:
        outputs: list[Output] = []
        for entry in entries:
            fields = {DATA_FIELD: entry.fields[DATA_FIELD]}
            outputs.append(Output(log_stream, fields))
            outputs.append(Output(events_stream, fields, EVENTS_MAXLEN))
        ids: list[Arg] = [entry.entry_id for entry in entries]

        def write(calls: KeyCalls) -> None:
            for session in range(SESSIONS_PER_BATCH):
                calls.add("SET", f"{PREFIX}ledger:{{{shard}}}:{session}", ids[-1])
            calls.add_members("SADD", seen_key, ids)

        def settled() -> None:
            totals[0] += len(entries)
            if totals[0] >= events:
                done.set()

        return BatchOutcome(outputs=outputs, write=write, on_settled=settled)

    return handle


async def run(url: str, events: int, shards: int, batch: int) -> float:
    """Fill the shard streams, then consume them all with one lane per shard: the CPU seconds of the consuming."""
    redis = worker_redis(url)  # tuned as a worker's: no per-command socket timeout (``redis_client.py``)
    streams = [f"{PREFIX}ingress:{{{shard}}}" for shard in range(shards)]
    fences = [Fence(f"{PREFIX}epoch:{{{shard}}}", "1") for shard in range(shards)]
    for stream, fence in zip(streams, fences, strict=True):
        await redis.set(fence.key, fence.token)
        await redis.xgroup_create(stream, GROUP, id="0", mkstream=True)
    await _FILL.run(redis, streams, [events, *templates()])
    done = asyncio.Event()
    totals = [0]
    config = ConsumerConfig(count=batch, block_ms=100, ordered=True, claim_all_on_start=True)
    consumers = [
        BatchConsumer(
            redis,
            stream=stream,
            group=GROUP,
            consumer="bench-1",
            handler=handler_for(shard, done, totals, events),
            config=replace(config, fence=fence),
        )
        for shard, (stream, fence) in enumerate(zip(streams, fences, strict=True))
    ]
    started = time.process_time()
    for consumer in consumers:
        consumer.start()
    await done.wait()
    for consumer in consumers:
        await consumer.stop(timeout_s=10)
    spent = time.process_time() - started
    for stream in streams:
        pending = await redis.xpending(stream, GROUP)
        if pending["pending"]:
            msg = f"{stream}: {pending['pending']} entries left pending"
            raise RuntimeError(msg)
    logged = sum([await redis.xlen(f"{PREFIX}log:{{{shard}}}") for shard in range(shards)])
    if logged != events:
        msg = f"{logged} log entries written for {events} events"
        raise RuntimeError(msg)
    await redis.aclose()
    return spent


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--events", type=int, default=8000)
    parser.add_argument("--batch", type=int, default=100, help="entries a batch (the consumer's read count)")
    parser.add_argument("--shards", type=int, default=2)
    args = parser.parse_args()
    # As a worker logs (JSON lines at INFO), to nowhere: the rendering is the runtime's cost, the terminal is not.
    configure_logging("INFO", json=True, stream=open(os.devnull, "w"))  # noqa: SIM115 - the process's lifetime
    server = start_local_redis(die_with_parent=True)
    freeze_startup_heap()  # the garbage collector as a worker process tunes it after its startup
    try:
        spent = asyncio.run(run(server.url, args.events, args.shards, args.batch))
    finally:
        server.stop()
    print(
        f"consumer runtime, {args.events} events over {args.shards} shard lanes, batches of {args.batch}: "
        f"{spent / args.events * 1e6:.1f} µs CPU an event"
    )


if __name__ == "__main__":
    main()
