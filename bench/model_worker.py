"""The model worker's added cost (issue 18): CPU per streamed event and time to first token through the bus,
each against the SDK streaming straight from the same fake server, as ratios measured in one run.

    uv run python bench/model_worker.py                 # ~1 minute
    uv run python bench/model_worker.py --calls 200 --chars 4000

Setup: a private Redis, the fake Anthropic-compatible server in its own process (``agentbus fake-model``),
one model worker process (``agentbus worker model``). Every call streams one text block of ``--chars``
characters in deltas of ``--chunk`` characters (``chars / chunk + 6`` events).

- **SDK baseline**: this process calls ``AsyncAnthropic().messages.create(stream=True)`` against the fake
  server and consumes every event. TTFT = from the call to the first event received; CPU = this process's
  CPU time while consuming, per event.
- **Through the bus**: this process plays the normalizer: it stores a request and publishes its notice
  (``RequestReady``) for a fresh session; the model worker takes it, calls the fake server the same way and
  publishes every event into the session's ingress. TTFT = from the notice's XADD to this process seeing the
  first ``stream_event`` entry in ingress (a blocking XREAD, so it includes one more Redis hop than the
  worker's own view); CPU = the worker process's CPU time (``/proc``) over the run, per event — all of it,
  its idle loops included.
- Baseline and bus calls alternate, so both see the same load on the machine.

The goal: added TTFT (bus p50 − SDK p50) ≤ 2 ms.

``--breakdown`` (issue 31) runs the worker with timing probes (``bench/probed_worker.py``) and prints where a
bus call's TTFT goes, step by step (p50 and p90 of each step's wall time, p50 of the worker's CPU time in it):
the notice read, the slot, the lease and session state, the request build, the bucket and the call's setup,
the HTTP request until its headers, the first event, the first write, and the reader's wake-up; beside the
SDK's own split of its TTFT (headers, first event) from the same fake server.
"""

from __future__ import annotations

import argparse
import asyncio
import atexit
import os
import secrets
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
import uuid
from pathlib import Path
from typing import Any

import orjson
import redis.asyncio as aioredis

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from anthropic import AsyncAnthropic

from agentbus_redis.bus.events import RequestReady
from agentbus_redis.local.redis_server import free_port, start_local_redis
from agentbus_redis.runtime.codec import entry_fields
from agentbus_redis.streams.names import StreamNames
from agentbus_redis.streams.topology import Topology
from agentbus_redis.workers.model.fake_server import FakeModelAdmin

SHARDS = 8
MODEL = "claude-sonnet-4-6"
CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: int) -> float:
    """utime + stime of ``pid`` (``/proc/<pid>/stat``)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / CLOCK_TICKS


def start_fake(log: Path) -> tuple[subprocess.Popen[bytes], str]:
    with log.open("wb") as out:
        process = subprocess.Popen(
            [sys.executable, "-m", "agentbus_redis.cli.main", "fake-model", "--port", "0"], stdout=out, stderr=out
        )
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        text = log.read_text(errors="replace")
        if "http://" in text:
            return process, text[text.index("http://") :].split()[0]
        time.sleep(0.05)
    raise RuntimeError(f"fake-model did not start: {log.read_text()}")


def start_worker(env: dict[str, str], log: Path, marks: Path | None = None) -> subprocess.Popen[bytes]:
    port = free_port()
    entry = ["-m", "agentbus_redis.cli.main"]
    if marks is not None:
        entry = [str(Path(__file__).with_name("probed_worker.py")), str(marks)]
    with log.open("wb") as out:
        process = subprocess.Popen(
            [sys.executable, *entry, "worker", "model", "--port", str(port)],
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    deadline = time.monotonic() + 180
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/readyz", timeout=1) as reply:
                if reply.status == 200:
                    return process
        except OSError:
            pass
        if process.poll() is not None:
            raise RuntimeError(f"model worker exited: {log.read_text()[-2000:]}")
        time.sleep(0.1)
    raise RuntimeError("model worker not ready")


def reply_step(chars: int, chunk: int) -> dict[str, Any]:
    text = ("The quick brown fox jumps over the lazy dog. " * (chars // 45 + 1))[:chars]
    content = [{"type": "text", "text": text}]
    return {"kind": "reply", "content": content, "stop_reason": "end_turn", "chunk_chars": chunk}


async def sdk_call(client: AsyncAnthropic, headers_s: list[float] | None = None) -> tuple[float, int, float]:
    """(TTFT s, events, CPU s of consuming them) of one direct streaming call; the time to the response's
    headers is appended to ``headers_s``."""
    cpu0 = time.process_time()
    started = time.perf_counter()
    stream = await client.messages.create(
        model=MODEL, max_tokens=1024, messages=[{"role": "user", "content": "hi"}], stream=True
    )
    if headers_s is not None:
        headers_s.append(time.perf_counter() - started)
    ttft = 0.0
    events = 0
    async for _ in stream:
        if events == 0:
            ttft = time.perf_counter() - started
        events += 1
    return ttft, events, time.process_time() - cpu0


async def bus_call(
    redis: aioredis.Redis, topology: Topology, walls: dict[str, tuple[float, float]] | None = None
) -> tuple[float, str]:
    """TTFT through the bus of one call for a fresh session: notice XADD → first stream_event in ingress
    (``walls``: the session's wall-clock start and end, for the breakdown)."""
    session = f"bench-{uuid.uuid4().hex[:12]}"
    request = {"messages": [{"role": "user", "content": "hi"}]}
    await redis.set(topology.request(session), orjson.dumps({"session_id": session, "seq": 1, "request": request}))
    notice = RequestReady(session_id=session, seq=1, key=topology.request(session), message_count=1)
    ingress = topology.ingress_for(session)
    last: Any = await redis.xrevrange(ingress, count=1)
    cursor = last[0][0] if last else b"0-0"
    wall = time.time()
    started = time.perf_counter()
    await redis.xadd(topology.requests_for(session), entry_fields(notice))  # type: ignore[arg-type]
    while True:
        rows: Any = await redis.xread({ingress: cursor}, block=5000, count=100)
        if not rows:
            raise TimeoutError("no stream event within 5 s")
        for _, entries in rows:
            for entry_id, fields in entries:
                cursor = entry_id
                if orjson.loads(fields[b"data"]).get("session_id") == session:
                    ttft = time.perf_counter() - started
                    if walls is not None:
                        walls[session] = (wall, wall + ttft)
                    return ttft, session


async def wait_answered(redis: aioredis.Redis, topology: Topology, sessions: list[str]) -> None:
    for session in sessions:
        deadline = time.monotonic() + 60
        while True:
            raw = await redis.get(topology.model_inflight(session))
            if raw is not None and orjson.loads(raw).get("state") == "answered":
                break
            if time.monotonic() > deadline:
                raise TimeoutError(f"{session} not answered")
            await asyncio.sleep(0.005)


STEPS = [
    ("handler", "notice read (XADD → the worker's handler)"),
    ("job", "slot: the call's task runs"),
    ("state", "lease + session state (1 round trip)"),
    ("built", "request build (catalog, config, params)"),
    ("sent", "token bucket + call setup"),
    ("headers", "HTTP request → response headers"),
    ("event", "first event parsed"),
    ("write", "first write queued → sent"),
    ("seen", "first write → the reader has it"),
]


def breakdown(marks_file: Path, walls: dict[str, tuple[float, float]], sdk_headers: list[float]) -> list[str]:
    """Per step of a bus call (``STEPS``): p50/p90 wall ms and p50 worker CPU ms, from the probes' marks."""
    marks: dict[str, dict[str, tuple[float, float]]] = {}
    handler_times: list[tuple[float, float]] = []
    pauses: list[tuple[float, float]] = []
    parsed: dict[str, int] = {}
    for line in marks_file.read_text().splitlines():
        stamp, name, session, value = line.split()
        if name == "gc":
            pauses.append((float(stamp), float(value)))
        elif name == "parsed":
            parsed[session] = int(value)
        elif name == "handler":
            handler_times.append((float(stamp), float(value)))
        else:
            marks.setdefault(session, {}).setdefault(name, (float(stamp), float(value)))
    walls_ms: dict[str, list[float]] = {name: [] for name, _ in STEPS}
    cpu_ms: dict[str, list[float]] = {name: [] for name, _ in STEPS}
    for session, (start, seen) in walls.items():
        own = marks.get(session)
        if own is None or "job" not in own or "written" not in own:
            continue
        own["handler"] = max((h for h in handler_times if h[0] <= own["job"][0]), default=(start, 0.0))
        previous: float = start
        previous_cpu: float | None = None
        for name, _ in STEPS:
            at, cpu = (seen, None) if name == "seen" else own[name]
            walls_ms[name].append((at - previous) * 1000)
            if cpu is not None and previous_cpu is not None:
                cpu_ms[name].append((cpu - previous_cpu) * 1000)
            previous, previous_cpu = at, cpu
    lines = [f"{'step':46} {'p50 ms':>7} {'p90 ms':>7} {'CPU p50':>8}"]
    for name, label in STEPS:
        values = walls_ms[name]
        if not values:
            continue
        cpu_text = f"{statistics.median(cpu_ms[name]):8.2f}" if cpu_ms[name] else f"{'':>8}"
        lines.append(f"{label:46} {statistics.median(values):7.2f} {p(values, 0.9):7.2f} {cpu_text}")
    lines.append(f"{'SDK alone: HTTP request → response headers':46} {statistics.median(sdk_headers) * 1000:7.2f}")
    before_write = [parsed[session] for session in walls if session in parsed]
    if before_write:
        lines.append(
            f"events parsed before the first write went out: p50 {statistics.median(before_write):.0f}, "
            f"p90 {p([float(n) for n in before_write], 0.9):.0f}, max {max(before_write)}"
        )
    first = min(start for start, _ in walls.values())
    measured = [pause for at, pause in pauses if at >= first]
    if measured:
        lines.append(
            f"GC pauses over 1 ms in the worker while measured: {len(measured)}, longest {max(measured):.1f} ms"
        )
    return lines


def p(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


async def run(args: argparse.Namespace) -> None:
    root = Path(tempfile.mkdtemp(prefix="agentbus-bench-model-"))
    atexit.register(shutil.rmtree, root, ignore_errors=True)
    redis_server = start_local_redis(root / "redis")
    fake, base_url = start_fake(root / "fake.log")
    admin = FakeModelAdmin(base_url)
    env = {
        **os.environ,
        "REDIS_URL": redis_server.url,
        "AGENTBUS_SHARDS": str(SHARDS),
        "AGENTBUS_INTERNAL_KEY": secrets.token_hex(16),
        "ANTHROPIC_API_KEY": "bench",
        "AGENTBUS_MODEL__BASE_URL": base_url,
        "AGENTBUS_MODEL__MODEL": MODEL,
        "AGENTBUS_RETENTION__ENABLED": "false",
        "LOG_LEVEL": "WARNING",
    }
    marks = root / "marks.txt" if args.breakdown else None
    worker = start_worker(env, root / "worker.log", marks)
    walls: dict[str, tuple[float, float]] = {}
    sdk_headers: list[float] = []
    redis = aioredis.Redis.from_url(redis_server.url)
    topology = Topology(StreamNames(prefix="agentbus:", shards=SHARDS))
    client = AsyncAnthropic(api_key="bench", base_url=base_url, max_retries=0)
    events_per_call = 0
    try:
        admin.script(None, [reply_step(args.chars, args.chunk)] * (2 * (args.calls + args.warmup)))
        for _ in range(args.warmup):  # connections, caches, first-call imports on both paths
            _, events_per_call, _ = await sdk_call(client)
            _, session = await bus_call(redis, topology)
            await wait_answered(redis, topology, [session])
        sdk_ttft: list[float] = []
        bus_ttft: list[float] = []
        sdk_cpu = 0.0
        sdk_events = 0
        sessions: list[str] = []
        worker_cpu0 = cpu_seconds(worker.pid)
        for _ in range(args.calls):
            ttft, events, cpu = await sdk_call(client, sdk_headers)
            sdk_ttft.append(ttft)
            sdk_cpu += cpu
            sdk_events += events
            ttft, session = await bus_call(redis, topology, walls)
            bus_ttft.append(ttft)
            sessions.append(session)
            await wait_answered(redis, topology, [session])
        worker_cpu = cpu_seconds(worker.pid) - worker_cpu0
        bus_events = sdk_events  # the same scripted reply each time
        published = sum([await redis.xlen(stream) for stream in [topology.ingress(s) for s in range(SHARDS)]])
    finally:
        await client.close()
        await redis.aclose()
        worker.terminate()
        worker.wait(timeout=30)
        fake.terminate()
        fake.wait(timeout=30)
        redis_server.stop()
    sdk_us = sdk_cpu / sdk_events * 1e6
    bus_us = worker_cpu / bus_events * 1e6
    sdk_p50, bus_p50 = statistics.median(sdk_ttft) * 1000, statistics.median(bus_ttft) * 1000
    added = bus_p50 - sdk_p50
    print(f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores")
    print(f"calls {args.calls} (after {args.warmup} warm-up), {events_per_call} events each, {published} published")
    print(
        f"TTFT p50   SDK {sdk_p50:7.2f} ms   bus {bus_p50:7.2f} ms   added {added:+6.2f} ms   x{bus_p50 / sdk_p50:5.2f}"
    )
    sdk_p90, bus_p90 = p(sdk_ttft, 0.9) * 1000, p(bus_ttft, 0.9) * 1000
    print(f"TTFT p90   SDK {sdk_p90:7.2f} ms   bus {bus_p90:7.2f} ms   added {bus_p90 - sdk_p90:+6.2f} ms")
    print(f"CPU/event  SDK {sdk_us:7.1f} µs   worker {bus_us:7.1f} µs   ratio {bus_us / sdk_us:5.2f}")
    print(f"goal: added TTFT p50 <= 2 ms: {'met' if added <= 2 else 'NOT met'}")
    if args.json:
        figures = {"sdk_p50_ms": sdk_p50, "bus_p50_ms": bus_p50, "added_p50_ms": added, "sdk_us": sdk_us}
        Path(args.json).write_text(orjson.dumps({**figures, "worker_us": bus_us, "calls": args.calls}).decode())
    if marks is not None:
        print("\nwhere a bus call's TTFT goes (the probes add a few µs a step):")
        print("\n".join(breakdown(marks, walls, sdk_headers)))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=60)
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--chars", type=int, default=2000)
    parser.add_argument("--chunk", type=int, default=16)
    parser.add_argument("--breakdown", action="store_true", help="time each step of a bus call (probed worker)")
    parser.add_argument("--json", help="also write the figures to this file (bench/run_all.py)")
    asyncio.run(run(parser.parse_args()))


if __name__ == "__main__":
    main()
