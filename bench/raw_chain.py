"""Baseline: a chain of raw, batched redis-py asyncio hops (redis-streams-baseline.md §4).

Topology: producer → s0 → hop1 → s1 → … → hopK → sK, every hop and the producer in its own process.
A hop does ``XREADGROUP COUNT c BLOCK 100``, ``orjson`` decode, stamps ``hop``, encodes, and writes all
the XADDs to the next stream plus one multi-id ``XACK`` in one non-transactional pipeline per batch.
The producer XADDs a ~310-byte JSON event in pipelines of 100, stamping ``time.time()`` into each event;
the last hop measures the end-to-end latency after its own XADD and XACK have completed.

- saturation mode (no ``rate``): the producer runs flat out; events/s = N / (last event done − first sent),
  i.e. the chain's drain rate. Latencies at saturation are a queueing artefact and only reported.
- paced mode (``rate`` R): the producer sends R events/s; p50/p99 latency is the figure of interest.

CPU per event comes from ``time.process_time()`` in every process and ``INFO cpu`` of Redis.

``run_raw_chain(redis_url, hops, n, rate=None, count=100) -> ChainResult`` is the reusable core, so another
benchmark can measure this baseline in the same run (``from bench.raw_chain import run_raw_chain`` with the
repository root on ``sys.path``; it is synchronous and starts its own processes with ``spawn``).

Usage: ``uv run python bench/raw_chain.py [--hops 4] [--n 50000] [--rate R] [--count 100] [--runs 1]
[--redis-url URL] [--aof] [--json FILE]`` — without ``--redis-url`` it starts a private redis-server.
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import json
import multiprocessing as mp
import os
import queue
import statistics
import sys
import time
from dataclasses import dataclass, field
from multiprocessing.synchronize import Event as MpEvent
from pathlib import Path
from typing import Any

import orjson
import redis
import redis.asyncio as aioredis

from agentbus_redis.local.redis_server import start_local_redis

GROUP = "g"
BLOCK_MS = 100
PRODUCER_BATCH = 100
SESSION_ID = "0b1c6f0e-3b7d-4d2e-9a51-6a7c2f1e8d40"


@dataclass
class ChainResult:
    """One chain run; times in seconds unless the name says otherwise."""

    hops: int
    n: int
    count: int
    rate_offered: float | None
    events_per_s: float
    """N / (last event acked by the last hop − first event sent)."""
    duration_s: float
    p50_ms: float
    p99_ms: float
    max_ms: float
    cpu_us_per_event: dict[str, float] = field(default_factory=dict)
    kernel_us_per_event: dict[str, float] = field(default_factory=dict)
    """Of ``cpu_us_per_event``, the time in the kernel (system calls: the sockets), per hop."""
    """producer, hop1…hopK, redis, total."""

    @property
    def mode(self) -> str:
        return "saturation" if self.rate_offered is None else "paced"

    def to_json(self) -> dict[str, Any]:
        return {"mode": self.mode, **dataclasses.asdict(self)}


def make_event(seq: int, ts: float) -> dict[str, Any]:
    """A ~310-byte event shaped like an agentbus tool call."""
    return {
        "v": 1,
        "type": "tool_call",
        "session_id": SESSION_ID,
        "uuid": f"7f3e2a10-{seq:08d}-4c1b-9d2e-5a6b7c8d9e0f",
        "parent_uuid": "7f3e2a10-00000000-4c1b-9d2e-5a6b7c8d9e0f",
        "seq": seq,
        "ts": ts,
        "payload": {
            "tool": "Bash",
            "input": {"command": "ls -la", "description": "List files"},
        },
        "hop": 0,
    }


def stream_name(prefix: str, index: int) -> str:
    return f"{prefix}s{index}"


# --------------------------------------------------------------------------------------------- hop process


async def _hop(url: str, prefix: str, hop: int, last: bool, n: int, count: int, go: MpEvent) -> dict[str, Any]:
    client = aioredis.Redis.from_url(url)
    src, dst = stream_name(prefix, hop - 1), stream_name(prefix, hop)
    try:
        await client.xgroup_create(src, GROUP, id="0", mkstream=True)
    except redis.ResponseError as exc:
        if "BUSYGROUP" not in str(exc):
            raise
    await asyncio.to_thread(go.wait)
    cpu0, kernel0 = time.process_time(), os.times().system
    consumer = f"hop{hop}"
    latencies: list[float] = []
    done = 0
    while done < n:
        reply: Any = await client.xreadgroup(GROUP, consumer, {src: ">"}, count=count, block=BLOCK_MS)
        if not reply:
            continue
        entries = reply[0][1]
        pipe = client.pipeline(transaction=False)
        stamps: list[float] = []
        ids: list[bytes] = []
        for entry_id, fields in entries:
            event = orjson.loads(fields[b"data"])
            event["hop"] = hop
            pipe.xadd(dst, {"data": orjson.dumps(event)})
            ids.append(entry_id)
            stamps.append(event["ts"])
        pipe.xack(src, GROUP, *ids)
        await pipe.execute()
        if last:
            now = time.time()
            latencies.extend(now - ts for ts in stamps)
        done += len(entries)
    done_at = time.time()
    cpu, kernel = time.process_time() - cpu0, os.times().system - kernel0
    await client.aclose()
    return {"role": f"hop{hop}", "cpu_s": cpu, "kernel_s": kernel, "done_at": done_at, "latencies": latencies}


def _hop_main(
    url: str, prefix: str, hop: int, last: bool, n: int, count: int, go: MpEvent, ready: Any, results: Any
) -> None:
    ready.put(hop)
    results.put(asyncio.run(_hop(url, prefix, hop, last, n, count, go)))


# ---------------------------------------------------------------------------------------- producer process


async def _produce(url: str, prefix: str, n: int, rate: float | None, go: MpEvent) -> dict[str, Any]:
    client = aioredis.Redis.from_url(url)
    target = stream_name(prefix, 0)
    await asyncio.to_thread(go.wait)
    cpu0 = time.process_time()
    start = time.time()
    sent = 0
    while sent < n:
        if rate is None:
            due = min(n, sent + PRODUCER_BATCH)
        else:
            due = min(n, int((time.time() - start) * rate) + 1, sent + PRODUCER_BATCH)
            if due <= sent:
                await asyncio.sleep(max(0.0, start + sent / rate - time.time()))
                continue
        now = time.time()
        pipe = client.pipeline(transaction=False)
        for seq in range(sent, due):
            pipe.xadd(target, {"data": orjson.dumps(make_event(seq, now))})
        await pipe.execute()
        sent = due
    cpu = time.process_time() - cpu0
    await client.aclose()
    return {"role": "producer", "cpu_s": cpu, "start": start, "end": time.time()}


def _producer_main(url: str, prefix: str, n: int, rate: float | None, go: MpEvent, ready: Any, results: Any) -> None:
    ready.put(0)
    results.put(asyncio.run(_produce(url, prefix, n, rate, go)))


# ------------------------------------------------------------------------------------------- orchestration


def _redis_cpu_s(client: redis.Redis) -> float:
    info: dict[str, Any] = client.info("cpu")
    return float(info["used_cpu_sys"]) + float(info["used_cpu_user"])


def _percentile(sorted_values: list[float], fraction: float) -> float:
    if not sorted_values:
        return float("nan")
    index = min(len(sorted_values) - 1, max(0, round(fraction * (len(sorted_values) - 1))))
    return sorted_values[index]


def run_raw_chain(
    redis_url: str, hops: int, n: int, rate: float | None = None, count: int = 100, *, timeout_s: float | None = None
) -> ChainResult:
    """Run one chain of ``hops`` hop processes over ``n`` events and measure it (see the module docstring)."""
    if hops < 1 or n < 1:
        msg = f"hops and n must be >= 1 (got hops={hops}, n={n})"
        raise ValueError(msg)
    ctx = mp.get_context("spawn")
    prefix = f"bench:rawchain:{os.getpid()}:{time.monotonic_ns()}:"
    go, ready, results = ctx.Event(), ctx.Queue(), ctx.Queue()
    processes = [
        ctx.Process(target=_hop_main, args=(redis_url, prefix, hop, hop == hops, n, count, go, ready, results))
        for hop in range(1, hops + 1)
    ]
    processes.append(ctx.Process(target=_producer_main, args=(redis_url, prefix, n, rate, go, ready, results)))
    limit = timeout_s if timeout_s is not None else 60.0 + n / (rate if rate else 1000.0)
    sync_client = redis.Redis.from_url(redis_url)
    try:
        for process in processes:
            process.start()
        for _ in processes:
            ready.get(timeout=60)
        # Every hop has created its group before it reports ready; give them a moment to block in XREADGROUP.
        time.sleep(0.2)
        redis_cpu0 = _redis_cpu_s(sync_client)
        go.set()
        reports: dict[str, dict[str, Any]] = {}
        deadline = time.monotonic() + limit
        while len(reports) < len(processes):
            try:
                report = results.get(timeout=1.0)
            except queue.Empty:
                crashed = [p.exitcode for p in processes if p.exitcode not in (None, 0)]
                if crashed or time.monotonic() > deadline:
                    msg = f"raw chain did not finish (exit codes {[p.exitcode for p in processes]})"
                    raise RuntimeError(msg) from None
                continue
            reports[report["role"]] = report
        redis_cpu = _redis_cpu_s(sync_client) - redis_cpu0
        for process in processes:
            process.join(timeout=10)
    finally:
        for process in processes:
            if process.is_alive():
                process.terminate()
                process.join()
        sync_client.delete(*[stream_name(prefix, index) for index in range(hops + 1)])
        sync_client.close()

    producer = reports["producer"]
    last = reports[f"hop{hops}"]
    duration = last["done_at"] - producer["start"]
    latencies_ms = sorted(value * 1000 for value in last["latencies"])
    cpu = {"producer": producer["cpu_s"] / n * 1e6}
    for hop in range(1, hops + 1):
        cpu[f"hop{hop}"] = reports[f"hop{hop}"]["cpu_s"] / n * 1e6
    cpu["redis"] = redis_cpu / n * 1e6
    cpu["total"] = sum(cpu.values())
    kernel = {f"hop{hop}": reports[f"hop{hop}"]["kernel_s"] / n * 1e6 for hop in range(1, hops + 1)}
    return ChainResult(
        hops=hops,
        n=n,
        count=count,
        rate_offered=rate,
        events_per_s=n / duration,
        duration_s=duration,
        p50_ms=_percentile(latencies_ms, 0.50),
        p99_ms=_percentile(latencies_ms, 0.99),
        max_ms=latencies_ms[-1],
        cpu_us_per_event={key: round(value, 1) for key, value in cpu.items()},
        kernel_us_per_event={key: round(value, 1) for key, value in kernel.items()},
    )


def format_table(results: list[ChainResult]) -> str:
    header = f"{'mode':<10} {'hops':>4} {'N':>7} {'count':>5} {'offered/s':>9} {'events/s':>9} "
    header += f"{'p50 ms':>7} {'p99 ms':>7} {'CPU µs/ev prod/hop avg/redis/Σ':>32}"
    lines = [header, "-" * len(header)]
    for result in results:
        cpu = result.cpu_us_per_event
        hop_avg = statistics.fmean(cpu[f"hop{hop}"] for hop in range(1, result.hops + 1))
        split = f"{cpu['producer']:.0f} / {hop_avg:.0f} / {cpu['redis']:.0f} / {cpu['total']:.0f}"
        offered = f"{result.rate_offered:.0f}" if result.rate_offered else "-"
        lines.append(
            f"{result.mode:<10} {result.hops:>4} {result.n:>7} {result.count:>5} {offered:>9} "
            f"{result.events_per_s:>9.0f} {result.p50_ms:>7.1f} {result.p99_ms:>7.1f} {split:>32}"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--hops", type=int, default=4)
    parser.add_argument("--n", type=int, default=50_000)
    parser.add_argument("--rate", type=float, default=None, help="paced mode: events/s offered")
    parser.add_argument("--count", type=int, default=100, help="XREADGROUP COUNT")
    parser.add_argument("--runs", type=int, default=1, help="repeat and report the median events/s run too")
    parser.add_argument("--redis-url", default=None, help="use this Redis instead of a private redis-server")
    parser.add_argument("--aof", action="store_true", help="private redis-server with appendonly everysec")
    parser.add_argument("--json", type=Path, default=None, help="also append the JSON results to this file")
    args = parser.parse_args(argv)

    server = None
    url = args.redis_url
    if url is None:
        server = start_local_redis(appendonly=args.aof)  # in a temp dir of its own, removed when it stops
        url = server.url
    try:
        results = [run_raw_chain(url, args.hops, args.n, args.rate, args.count) for _ in range(args.runs)]
    finally:
        if server is not None:
            server.stop()
    print(format_table(results))
    payload: dict[str, Any] = {"runs": [result.to_json() for result in results]}
    if len(results) > 1:
        payload["median_events_per_s"] = statistics.median(result.events_per_s for result in results)
    text = json.dumps(payload, indent=2)
    print(text)
    if args.json is not None:
        with args.json.open("a", encoding="utf-8") as handle:
            handle.write(json.dumps(payload) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
