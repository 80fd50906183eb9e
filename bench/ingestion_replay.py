"""The ingestion worker's own CPU per event, in one process, without the network (issue 31).

    uv run python bench/ingestion_replay.py [--events 8800] [--sessions 100] [--rounds 5] [--batch 100]

``bench/pipeline.py`` measures ingestion's CPU per event with the worker in its own process, the producer and
Redis beside it, and on a shared 2-core machine that figure moves by ±30% from one minute to the next. This
bench takes out what it can of that noise: the turns mix of ``bench/pipeline.py`` (whole agent turns, 22
ingress entries each, sessions interleaved) goes, shard by shard in batches, through the unmodified
``IngestionWorker.handle``, its state writes are queued as the consumer queues them (``BatchOutcome.write``)
and the batch is settled (its ledgers cached), but nothing is sent: what is timed (``time.process_time``) is
the worker's own code per event, the part a change to ingestion can move. Each round starts a fresh worker on
an empty private Redis (its first batch of a session reads the empty ledger, as a new session does); the best
round is printed, which is the least disturbed by the rest of the machine.

``--digest FILE`` checks instead that a change to ingestion writes what the code before it wrote: the batches
(saved to FILE on the first run, read from it after, so two checkouts replay the same entries) go through a
worker with a deterministic clock and ids, every batch's settlement is executed on the private Redis, and a
sha256 over every packed settlement (log entries, tool jobs, state JSON, reply lists, indexes) is printed. With
``--reload-every K`` the worker forgets its ledgers every K batches, so the next batches rebuild them from what
Redis holds (state JSON and reply lists read back, as after a restart). Run the same command with the other
checkout's Python (``/work/wt/base/.venv/bin/python bench/ingestion_replay.py --digest FILE``) and compare.
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import itertools
import os
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import orjson
import redis.asyncio as aioredis
from redis.asyncio.connection import Connection

from agentbus_redis.clock import FixedClock
from agentbus_redis.ids import SequentialIds
from agentbus_redis.local.redis_server import start_local_redis
from agentbus_redis.observability.logging import configure_logging
from agentbus_redis.runtime.codec import DATA_FIELD, entry_fields
from agentbus_redis.runtime.consumer import BatchOutcome
from agentbus_redis.runtime.key_calls import KeyCalls
from agentbus_redis.streams.entries import StreamEntry
from agentbus_redis.streams.names import StreamNames
from agentbus_redis.streams.topology import Topology
from agentbus_redis.subagents.ingestion_hooks import IngestionAgentHooks
from agentbus_redis.subagents.relay import ChildRelay
from agentbus_redis.workers.ingestion.worker import IngestionWorker
from agentbus_redis.workers.registry import freeze_startup_heap
from bench.pipeline import turn_workload

SHARDS = 4
GROUP = "ingestion"
FENCE_KEY = "bench:lease"


def batches(events: int, sessions: int, size: int, topology: Topology) -> list[tuple[int, list[StreamEntry]]]:
    """The turns mix as the ingestion consumer reads it: per shard in stream order, ``size`` entries a batch,
    the shards' batches interleaved. Entry ids advance a millisecond an event, as a producer's would."""
    per_shard: dict[int, list[StreamEntry]] = {}
    start_ms = int(time.time() * 1000)
    for index, (session, envelope) in enumerate(turn_workload(events, sessions)):
        shard = topology.names.shard_of(session)
        entry = StreamEntry(topology.ingress(shard), f"{start_ms + index}-0", entry_fields(envelope))
        per_shard.setdefault(shard, []).append(entry)
    chunked = {
        shard: [entries[i : i + size] for i in range(0, len(entries), size)] for shard, entries in per_shard.items()
    }
    out: list[tuple[int, list[StreamEntry]]] = []
    for step in range(max(len(chunks) for chunks in chunked.values())):
        out += [(shard, chunks[step]) for shard, chunks in sorted(chunked.items()) if step < len(chunks)]
    return out


def settlement(
    entries: list[StreamEntry], outcome: BatchOutcome, packer: Connection, group: str = GROUP
) -> list[bytes]:
    """The one script a batch is settled with, packed as the consumer sends it (``BatchConsumer._collect_writes``
    and ``_write_atomically``): the outputs' XADDs, the handler's own writes, the XACK, under the lease's fence."""
    calls = KeyCalls()
    for output in outcome.outputs:
        calls.add_xadd(output.stream, output.fields, output.maxlen)
    if outcome.write is not None:
        outcome.write(calls)
    calls.add_members("XACK", entries[0].stream, [entry.entry_id for entry in entries], group)
    return packer.pack_commands([calls.fenced_command(key=FENCE_KEY, token="1")])


async def replay_round(url: str, work: list[tuple[int, list[StreamEntry]]], topology: Topology) -> float:
    """One fresh worker through ``work``: its CPU seconds."""
    redis = aioredis.Redis.from_url(url)
    worker = IngestionWorker(redis, topology, tool_deadline_ms=600_000, internal_key=b"k" * 32, max_entry_bytes=1 << 20)
    # As the worker's runtime sets it up (workers/ingestion/app.py); the turns mix relays no child session.
    worker.agents = IngestionAgentHooks(ChildRelay(redis, topology, internal_key=worker.internal_key))
    handlers = {shard: worker.handler_for(shard, 1) for shard in range(SHARDS)}
    packer = Connection()
    started = time.process_time()
    for shard, entries in work:
        outcome = await handlers[shard](entries)
        settlement(entries, outcome, packer)
        if outcome.on_settled is not None:
            outcome.on_settled()
    spent = time.process_time() - started
    await redis.aclose()
    return spent


def digest_work(
    path: Path, events: int, sessions: int, size: int, topology: Topology
) -> list[tuple[int, list[StreamEntry]]]:
    """The batches of ``--digest``: read from ``path``, or made (``batches``) and saved there."""
    if not path.exists():
        work = batches(events, sessions, size, topology)
        rows = [
            [shard, [[e.stream, e.entry_id, {k: v.decode() for k, v in e.fields.items()}] for e in entries]]
            for shard, entries in work
        ]
        path.write_bytes(orjson.dumps(rows))
    return [
        (
            shard,
            [
                StreamEntry(stream, entry_id, {k: v.encode() for k, v in fields.items()})
                for stream, entry_id, fields in entries
            ],
        )
        for shard, entries in orjson.loads(path.read_bytes())
    ]


async def digest_round(
    url: str, work: list[tuple[int, list[StreamEntry]]], topology: Topology, reload_every: int
) -> str:
    """``work`` through a deterministic worker whose writes are executed: the sha256 of every settlement."""
    import random
    import secrets

    from agentbus_redis.observability import tracing

    seeded = random.Random(0)
    secrets.token_bytes = seeded.randbytes  # type: ignore[assignment]  # span ids (the traceparents)
    tracing._random.reset()
    redis = aioredis.Redis.from_url(url)
    await redis.flushall()
    await redis.set(FENCE_KEY, "1")
    ticks = itertools.count(1_800_000_000_000, 7)
    worker = IngestionWorker(
        redis,
        topology,
        tool_deadline_ms=600_000,
        internal_key=b"k" * 32,
        max_entry_bytes=1 << 20,
        clock=FixedClock(),
        ids=SequentialIds(),
        now_ms=lambda: next(ticks),
    )
    worker.agents = IngestionAgentHooks(ChildRelay(redis, topology, internal_key=worker.internal_key))
    handlers = {shard: worker.handler_for(shard, 1) for shard in range(SHARDS)}
    packer = Connection()
    digest = hashlib.sha256()
    for number, (shard, entries) in enumerate(work, 1):
        outcome = await handlers[shard](entries)
        for packed in settlement(entries, outcome, packer):
            digest.update(packed)
        calls = KeyCalls()
        for output in outcome.outputs:
            calls.add_xadd(output.stream, output.fields, output.maxlen)
        if outcome.write is not None:
            outcome.write(calls)
        await calls.write(redis)
        if outcome.on_settled is not None:
            outcome.on_settled()
        if reload_every and number % reload_every == 0:
            for each in range(SHARDS):
                worker.forget_shard(each)
    await redis.aclose()
    return digest.hexdigest()


def raw_hop_round(work: list[tuple[int, list[StreamEntry]]]) -> float:
    """The same batches through a raw hop (``bench/raw_chain.py``): decode, stamp, encode, and the XADDs and the
    XACK of a pipeline, packed as redis-py sends them. The least a consumer's own code does: the yardstick."""
    client = aioredis.Redis()
    packer = Connection()
    started = time.process_time()
    for _, entries in work:
        pipe = client.pipeline(transaction=False)
        for entry in entries:
            event = orjson.loads(entry.fields[DATA_FIELD])
            event["hop"] = 1
            pipe.xadd("next", {"data": orjson.dumps(event)})
        pipe.xack(entries[0].stream, GROUP, *(entry.entry_id for entry in entries))
        packer.pack_commands([command for command, _ in pipe.command_stack])
    return time.process_time() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--events", type=int, default=8800)
    parser.add_argument("--sessions", type=int, default=100)
    parser.add_argument("--batch", type=int, default=100, help="entries a batch (the consumer's read count)")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--raw", action="store_true", help="the same batches through a raw hop instead")
    parser.add_argument("--digest", type=Path, help="print the sha256 of every write instead (batches saved here)")
    parser.add_argument("--reload-every", type=int, default=0, help="--digest: forget the ledgers every K batches")
    args = parser.parse_args()
    # As a worker logs (JSON lines at INFO), to nowhere: the rendering is the worker's cost, the terminal is not.
    configure_logging("INFO", json=True, stream=open(os.devnull, "w"))  # noqa: SIM115 - the process's lifetime
    topology = Topology(StreamNames(prefix="bench:", shards=SHARDS))
    if args.digest is not None:
        work = digest_work(args.digest, args.events, args.sessions, args.batch, topology)
        server = start_local_redis(die_with_parent=True)
        try:
            print(asyncio.run(digest_round(server.url, work, topology, args.reload_every)))
        finally:
            server.stop()
        return
    work = batches(args.events, args.sessions, args.batch, topology)
    events = sum(len(entries) for _, entries in work)
    server = start_local_redis(die_with_parent=True)
    freeze_startup_heap()  # the garbage collector as a worker process tunes it after its startup
    try:
        if args.raw:
            spent = [raw_hop_round(work) for _ in range(args.rounds)]
        else:
            spent = [asyncio.run(replay_round(server.url, work, topology)) for _ in range(args.rounds)]
    finally:
        server.stop()
    per_event = sorted(seconds / events * 1e6 for seconds in spent)
    print(
        f"{'a raw hop' if args.raw else 'ingestion'}, turns mix, {events} events over {args.sessions} sessions, "
        f"batches of {args.batch}: best {per_event[0]:.1f} µs CPU an event, median {statistics.median(per_event):.1f} "
        f"({', '.join(f'{value:.1f}' for value in per_event)})"
    )


if __name__ == "__main__":
    main()
