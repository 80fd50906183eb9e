"""The typed floor under ``bench/pipeline.py`` (issue 31): the least any pipeline that keeps the bus's contracts
must do, measured beside the raw chain in the same run.

    uv run python bench/typed_floor.py [--mix turns|prompts] [--events 22000] [--sessions 500] [--rounds 3]

The raw chain (``bench/raw_chain.py``) moves opaque JSON: ``orjson`` in, ``orjson`` out. The bus may not. Every
record that crosses a worker boundary is a pydantic model, validated on the way in and dumped on the way out
(the contract "every message and event is a pydantic model"), and a transcript is only written once it is on
disk. So the floor here runs the real topology of the pipeline with exactly that and nothing else:

- ``ingestion``: reads the mix's real ingress entries, validates each with ``parse_ingress``, dumps the log entries
  the real ledger made of it (computed before the clock starts) with ``to_wire_json`` and ``XADD``s them, then
  ``XACK``s: no ledger rules, no idempotency keys, no state, no live reply, no crash record.
- ``normalization`` (a consumer group on that log): validates each entry with ``parse_log_entry``; where the real
  worker publishes a request, it stores the request the real ``RequestBuilder`` built (computed before the clock
  starts, so no request is built here) with ``orjson`` and ``SET``, and ``XADD``s a validated ``RequestReady``
  notice; ``XACK``.
- ``transcripts`` (a second group on the log): validates each entry, dumps its message with ``to_wire_json``,
  appends the lines of the batch to a file and ``fsync``s it once per batch; ``XACK``.

Batches are ``XREADGROUP COUNT 100``, writes one non-transactional pipeline per batch, as in the raw chain. What a
worker of the bus does beyond this (the rules, exactly-once, crash safety, fencing, metrics, logs) is the bus's
own cost; this is what no implementation of the contracts in this stack can avoid. Printed: events/s against a
3-hop raw chain in the same run (median of ``--rounds`` alternating rounds), and each floor worker's CPU per
ingress event beside a raw hop's, the figures of the issue's table. The floor uses the workload's own entries;
the raw chain its ~310-byte events, as ``bench/pipeline.py`` compares.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import multiprocessing as mp
import os
import queue
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Coroutine
from dataclasses import dataclass
from multiprocessing.synchronize import Event as MpEvent
from pathlib import Path
from typing import Any

import orjson
import redis
import redis.asyncio as aioredis

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from agentbus_redis.bus.events import LogEntry, RequestReady, parse_ingress, parse_log_entry
from agentbus_redis.bus.ledger import SessionLedger, new_ledger_state
from agentbus_redis.bus.session_history import SessionHistory
from agentbus_redis.local.redis_server import start_local_redis
from agentbus_redis.normalize.incremental import RequestBuilder
from agentbus_redis.workers.normalization.worker import SENDER_FITS_THINKING
from bench.pipeline import WORKLOADS
from bench.raw_chain import run_raw_chain

GROUP_NORMALIZATION = "normalization"
GROUP_TRANSCRIPTS = "transcripts"
COUNT = 100
BLOCK_MS = 100


@dataclass(frozen=True)
class Plan:
    """The mix as the real rules turn it into records, computed before any clock starts."""

    ingress: list[bytes]
    """The ingress entries' JSON, in the order the producer sends them."""
    log_entries: list[list[LogEntry]]
    """Per ingress entry, the log entries the real ledger made of it."""
    requests: dict[int, tuple[str, int, dict[str, Any]]]
    """Per log entry (its index in the log), the request the real worker publishes after it: session, seq, body
    (encoded in the run, as the worker encodes it)."""

    @property
    def log_count(self) -> int:
        return sum(len(entries) for entries in self.log_entries)


def make_plan(mix: str, events: int, sessions: int) -> Plan:
    """Apply the mix through the real ledger and request builder, one session history at a time."""
    workload = WORKLOADS[mix](events, sessions)
    ledgers: dict[str, SessionLedger] = {}
    histories: dict[str, tuple[SessionHistory, RequestBuilder]] = {}
    log_entries: list[list[LogEntry]] = []
    requests: dict[int, tuple[str, int, dict[str, Any]]] = {}
    index = 0
    for session, envelope in workload:
        ledger = ledgers.get(session) or ledgers.setdefault(session, SessionLedger(new_ledger_state(session)))
        out = ledger.apply(envelope, now_ms=0, ingress_id="1-0")
        log_entries.append(list(out.entries))
        for entry in out.entries:
            history, builder = histories.get(session) or histories.setdefault(
                session, (SessionHistory(session), RequestBuilder(options=SENDER_FITS_THINKING))
            )
            if history.apply(entry) and history.needs_request():
                request = builder.build(history.messages).result.request
                body = {"session_id": session, "seq": entry.seq, "request": request, "repairs": {}}
                requests[index] = (session, entry.seq, body)
                history.mark_published()
            index += 1
    return Plan([envelope.to_wire_json().encode() for _, envelope in workload], log_entries, requests)


# ------------------------------------------------------------------------------------------------ processes
async def _consume(
    client: aioredis.Redis, stream: str, group: str, name: str, expected: int, handle: Any
) -> tuple[float, float]:
    """Read ``stream`` as ``group`` until ``expected`` entries were handled; CPU seconds and when it ended."""
    cpu0 = time.process_time()
    done = 0
    while done < expected:
        reply: Any = await client.xreadgroup(group, name, {stream: ">"}, count=COUNT, block=BLOCK_MS)
        if not reply:
            continue
        entries = reply[0][1]
        pipe = client.pipeline(transaction=False)
        await handle(pipe, entries)
        pipe.xack(stream, group, *(entry_id for entry_id, _ in entries))
        await pipe.execute()
        done += len(entries)
    return time.process_time() - cpu0, time.time()


async def _ingestion(url: str, prefix: str, plan: Plan, go: MpEvent) -> dict[str, Any]:
    client = aioredis.Redis.from_url(url)
    source, log = f"{prefix}ingress", f"{prefix}log"
    await client.xgroup_create(source, "ingestion", id="0", mkstream=True)
    await asyncio.to_thread(go.wait)

    async def handle(pipe: Any, entries: list[Any]) -> None:
        for _, fields in entries:
            parse_ingress(fields[b"data"])
            for entry in plan.log_entries[int(fields[b"i"])]:
                pipe.xadd(log, {"data": entry.to_wire_json().encode()})

    cpu, done_at = await _consume(client, source, "ingestion", "ingestion", len(plan.ingress), handle)
    await client.aclose()
    return {"role": "ingestion", "cpu_s": cpu, "done_at": done_at, "events": len(plan.ingress)}


async def _normalization(url: str, prefix: str, plan: Plan, go: MpEvent) -> dict[str, Any]:
    client = aioredis.Redis.from_url(url)
    log = f"{prefix}log"
    await asyncio.to_thread(go.wait)
    seen = 0

    async def handle(pipe: Any, entries: list[Any]) -> None:
        nonlocal seen
        for _, fields in entries:
            parse_log_entry(fields[b"data"])
            if (due := plan.requests.get(seen)) is not None:
                session, seq, body = due
                key = f"{prefix}request:{session}"
                pipe.set(key, orjson.dumps(body))
                notice = RequestReady(session_id=session, seq=seq, key=key, message_count=0)
                pipe.xadd(f"{prefix}requests", {"data": notice.to_wire_json().encode()})
            seen += 1

    cpu, done_at = await _consume(client, log, GROUP_NORMALIZATION, "n", plan.log_count, handle)
    await client.aclose()
    return {"role": "normalization", "cpu_s": cpu, "done_at": done_at}


async def _transcripts(url: str, prefix: str, plan: Plan, go: MpEvent, directory: str) -> dict[str, Any]:
    client = aioredis.Redis.from_url(url)
    log = f"{prefix}log"
    await asyncio.to_thread(go.wait)
    path = Path(directory) / "floor.jsonl"
    with path.open("ab") as file:

        async def handle(_pipe: Any, entries: list[Any]) -> None:
            lines = [parse_log_entry(fields[b"data"]).message.to_wire_json().encode() + b"\n" for _, fields in entries]
            file.write(b"".join(lines))
            file.flush()
            os.fsync(file.fileno())

        cpu, done_at = await _consume(client, log, GROUP_TRANSCRIPTS, "t", plan.log_count, handle)
    await client.aclose()
    return {"role": "transcripts", "cpu_s": cpu, "done_at": done_at}


async def _produce(url: str, prefix: str, plan: Plan, go: MpEvent) -> dict[str, Any]:
    client = aioredis.Redis.from_url(url)
    await asyncio.to_thread(go.wait)
    start = time.time()
    for first in range(0, len(plan.ingress), COUNT):
        pipe = client.pipeline(transaction=False)
        for index in range(first, min(first + COUNT, len(plan.ingress))):
            pipe.xadd(f"{prefix}ingress", {"data": plan.ingress[index], "i": index})
        await pipe.execute()
    await client.aclose()
    return {"role": "producer", "start": start}


def _main(role: str, url: str, prefix: str, args: tuple[str, int, int], go: MpEvent, ready: Any, out: Any) -> None:
    plan = make_plan(*args)  # each process makes its own copy of the same plan, before the clock starts
    work: Coroutine[Any, Any, dict[str, Any]]
    if role == "ingestion":
        work = _ingestion(url, prefix, plan, go)
    elif role == "normalization":
        work = _normalization(url, prefix, plan, go)
    elif role == "transcripts":
        directory = tempfile.mkdtemp(prefix="agentbus-floor-")
        work = _transcripts(url, prefix, plan, go, directory)
    else:
        work = _produce(url, prefix, plan, go)
    ready.put(role)
    try:
        out.put(asyncio.run(work))
    finally:
        if role == "transcripts":
            shutil.rmtree(directory, ignore_errors=True)


def run_floor(url: str, mix: str, events: int, sessions: int) -> dict[str, float]:
    """One floor run: events/s from the first send until both log groups are done, CPU µs per ingress event."""
    ctx = mp.get_context("spawn")
    prefix = f"bench:floor:{os.getpid()}:{time.monotonic_ns()}:"
    sync = redis.Redis.from_url(url)
    sync.xgroup_create(f"{prefix}log", GROUP_NORMALIZATION, id="0", mkstream=True)
    sync.xgroup_create(f"{prefix}log", GROUP_TRANSCRIPTS, id="0")
    go, ready, out = ctx.Event(), ctx.Queue(), ctx.Queue()
    roles = ["ingestion", "normalization", "transcripts", "producer"]
    processes = [
        ctx.Process(target=_main, args=(role, url, prefix, (mix, events, sessions), go, ready, out)) for role in roles
    ]
    try:
        for process in processes:
            process.start()
        for _ in processes:
            ready.get(timeout=300)
        time.sleep(0.3)  # the consumers reach their XREADGROUP
        go.set()
        reports: dict[str, dict[str, Any]] = {}
        while len(reports) < len(roles):
            try:
                report = out.get(timeout=1.0)
            except queue.Empty:
                if any(process.exitcode not in (None, 0) for process in processes):
                    raise RuntimeError("a floor process failed") from None
                continue
            reports[report["role"]] = report
    finally:
        for process in processes:
            process.join(timeout=10)
            if process.is_alive():
                process.terminate()
        for key in sync.scan_iter(f"{prefix}*"):
            sync.delete(key)
        sync.close()
    ended = max(reports[role]["done_at"] for role in ("normalization", "transcripts"))
    count = reports["ingestion"]["events"]
    figures = {"events_per_s": count / (ended - reports["producer"]["start"])}
    for role in roles[:3]:
        figures[role] = reports[role]["cpu_s"] / count * 1e6
    return figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--mix", choices=sorted(WORKLOADS), default="turns")
    parser.add_argument("--events", type=int, default=22_000)
    parser.add_argument("--sessions", type=int, default=500)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--json", type=Path, default=None, help="also write the figures to this file")
    args = parser.parse_args()
    events = len(WORKLOADS[args.mix](args.events, args.sessions))  # what make_plan sends, without applying it
    ratios, floors, raws = [], [], []
    with tempfile.TemporaryDirectory(prefix="agentbus-floor-redis-") as scratch:
        server = start_local_redis(Path(scratch))
        try:
            for _ in range(args.rounds):  # alternating, as bench/pipeline.py does: the machine drifts
                raw = run_raw_chain(server.url, 3, events)
                floor = run_floor(server.url, args.mix, args.events, args.sessions)
                raws.append(raw)
                floors.append(floor)
                ratios.append(floor["events_per_s"] / raw.events_per_s)
        finally:
            server.stop()
    raw_hop = statistics.median(statistics.fmean(r.cpu_us_per_event[f"hop{h}"] for h in (1, 2, 3)) for r in raws)
    print(f"typed floor, {args.mix} mix, {events} ingress events over {args.sessions} sessions, {args.rounds} rounds")
    print(
        f"  raw chain  {statistics.median(r.events_per_s for r in raws):>8.0f} ev/s   one raw hop {raw_hop:.1f} µs/ev"
    )
    print(
        f"  floor      {statistics.median(f['events_per_s'] for f in floors):>8.0f} ev/s   "
        f"floor vs raw {statistics.median(ratios):.2f}× (rounds: {', '.join(f'{r:.2f}' for r in ratios)})"
    )
    cpu = " / ".join(
        f"{statistics.median(f[role] for f in floors):.1f}" for role in ("ingestion", "normalization", "transcripts")
    )
    print(f"  floor CPU µs per ingress event, ingestion / normalization / transcripts: {cpu}")
    if args.json is not None:
        figures = {
            "mix": args.mix,
            "floor_vs_raw": statistics.median(ratios),
            "raw_hop_cpu_us_per_event": raw_hop,
            "cpu_us_per_event": {
                role: statistics.median(f[role] for f in floors)
                for role in ("ingestion", "normalization", "transcripts")
            },
        }
        args.json.write_text(json.dumps(figures, indent=2))


if __name__ == "__main__":
    main()
