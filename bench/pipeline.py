"""End-to-end pipeline benchmark against a raw batched redis-py chain measured in the same run.

    uv run python bench/pipeline.py                 # saturation throughput + latency at 1k events/s
    uv run python bench/pipeline.py --events 20000 --aof

What is measured (issue 4):
- **throughput**: N events (prompts and assistant replies over S sessions, pipelined by the producer)
  from the first XADD until every one is in the canonical log, its request (if any) published and its
  transcript line fsync'd — i.e. until the normalization and transcript groups have settled;
- **latency**: a producer paced at R events/s over ``--paced-sessions`` sessions; every event's time from
  its ingress entry id (the producer's write) to its durable transcript line, read from the transcript
  worker's ``agentbus_end_to_end_latency_seconds{stage="transcript_durable"}`` histogram, and the share
  of it spent before the canonical log (``stage="log_written"``). Steady state: the fresh workers first
  carry ``--warmup-seconds`` of the same paced traffic on other sessions, outside the measured window
  (their first ~0.5 s runs on cold caches, a process-start cost the raw chain does not have);
- **baseline**: ``bench/raw_chain.py`` with the same number of consuming hops (3: ingestion, then
  normalization and transcripts) on the same private Redis, in the same run; the figures are printed
  as ratios to it. Throughput is measured in ``--rounds`` alternating raw / agentbus rounds (fresh
  workers, empty Redis each) and the median of the per-round ratios is reported: on a shared 2-vCPU
  machine single runs of either side vary by ±30%;
- **metrics cost** (``--metrics-rounds N``, issue 5): N alternating saturation rounds with
  ``AGENTBUS_METRICS`` on and off; medians of throughput and of CPU µs per event.
- **cluster cost** (``--cluster``, issue 20): instead of the raw chain, one Redis against a private 3-master
  Redis Cluster (``redis+cluster://``) in the same run: alternating saturation rounds (medians), latency at
  ``--rate`` on each, and the Redis CPU per event (all redis-server processes) — the basis of a per-node
  capacity projection. On one 2-core machine no scaling is expected: it prices cluster mode (goal ≥ 0.8×).
"""

from __future__ import annotations

import argparse
import asyncio
import atexit
import ctypes
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import redis
import redis.asyncio as aioredis
from redis.asyncio.cluster import RedisCluster

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from agentbus_redis.bus.events import AssistantReply, IngressEnvelope, StreamEvent, ToolResultReport, UserPrompt
from agentbus_redis.cli.local.demo import stream_events_for
from agentbus_redis.local.redis_cluster import LocalRedisCluster, start_local_cluster
from agentbus_redis.local.redis_server import LocalRedis, free_port, start_local_redis
from agentbus_redis.messages.content import TextBlock, ToolResultBlock, ToolUseBlock
from agentbus_redis.messages.factories import create_assistant_message, create_user_message
from agentbus_redis.runtime.key_calls import Arg, ServerScript
from agentbus_redis.sdk.client import AgentbusClient
from agentbus_redis.streams.names import StreamNames
from agentbus_redis.streams.topology import NORMALIZATION_GROUP, TRANSCRIPTS_GROUP, Topology
from bench.raw_chain import run_raw_chain

HOPS = 3
SHARDS = 8


@dataclass
class Workers:
    processes: list[subprocess.Popen[bytes]]
    ports: dict[str, int]

    def pids(self) -> dict[str, int]:
        return {name: process.pid for name, process in zip(self.ports, self.processes, strict=True)}

    def wait_ready(self, timeout_s: float = 60.0) -> None:
        """Until every worker answers ``/readyz`` with 200."""
        deadline = time.monotonic() + timeout_s
        for name, port in self.ports.items():
            while True:
                try:
                    with urllib.request.urlopen(f"http://127.0.0.1:{port}/readyz", timeout=1) as reply:
                        if reply.status == 200:
                            break
                except OSError:
                    pass
                if time.monotonic() > deadline:
                    raise TimeoutError(f"{name} not ready")
                time.sleep(0.05)

    def stop(self) -> None:
        for process in self.processes:
            if process.poll() is None:
                process.send_signal(signal.SIGTERM)
        for process in self.processes:
            try:
                process.wait(timeout=20)
            except subprocess.TimeoutExpired:
                process.kill()


def start_workers(redis_url: str, root: Path, *, metrics: bool = True) -> Workers:
    # Every other setting (group-commit window, XREADGROUP BLOCK, batch size) is the shipped default.
    env = {
        **os.environ,
        "REDIS_URL": redis_url,
        "AGENTBUS_DATA_DIR": str(root / "data"),
        "AGENTBUS_INTERNAL_KEY": "bench-internal-key",
        "AGENTBUS_SHARDS": str(SHARDS),
        "LOG_LEVEL": "WARNING",
        "AGENTBUS_METRICS": "true" if metrics else "false",
    }
    processes, ports = [], {}
    for name in ("ingestion", "normalization", "transcripts"):
        port = free_port()
        ports[name] = port
        if os.environ.get("BENCH_PROFILE"):
            entry = [str(Path(__file__).with_name("profiled_worker.py")), str(root / f"{name}.prof")]
        else:
            entry = ["-m", "agentbus_redis.cli.main"]
        command = [sys.executable, *entry, "worker", name, "--port", str(port)]
        processes.append(subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
    workers = Workers(processes, ports)
    workers.wait_ready()
    if os.environ.get("BENCH_PIDS"):
        Path(os.environ["BENCH_PIDS"]).write_text(json.dumps(workers.pids()))
    return workers


def prompt_workload(events: int, sessions: int) -> list[tuple[str, IngressEnvelope]]:
    """Worst case for the normalizer: alternating prompts and replies, a request for every other event."""
    out: list[tuple[str, IngressEnvelope]] = []
    for index in range(events):
        session = f"bench-{index % sessions}"
        turn = index // sessions
        if turn % 2 == 0:
            payload: Any = UserPrompt(content=f"question {turn} of {session}: what is {turn} + {turn}?")
        else:
            payload = AssistantReply(message=create_assistant_message(f"{turn - 1} + {turn - 1} is {2 * (turn - 1)}."))
        out.append((session, IngressEnvelope(session_id=session, idempotency_key=f"{session}:{turn}", payload=payload)))
    return out


def _turn(session: str, turn: int) -> list[Any]:
    """One agent turn as its producers send it: a prompt, a streamed reply with a tool call, the tool's
    result, and a streamed final answer (two model calls, so two API requests)."""
    call = ToolUseBlock(
        id=f"toolu_{session.replace('-', '')}_{turn}", name="Read", input={"file_path": f"src/m{turn}.py"}
    )
    first = stream_events_for(
        [TextBlock(text=f"Turn {turn}: let me read the module before changing it."), call],
        message_id=f"msg_{session}_{turn}_a",
        model="claude-bench",
    )
    final = stream_events_for(
        [TextBlock(text=f"The module defines {turn} functions; nothing needs to change.")],
        message_id=f"msg_{session}_{turn}_b",
        model="claude-bench",
    )
    result = create_user_message([ToolResultBlock(tool_use_id=call.id, content=f"def f{turn}(): ...\n")])
    return [
        UserPrompt(content=f"turn {turn}: check module m{turn}"),
        *(StreamEvent(request_id=f"req_{session}_{turn}_a", event=event, execute_tools=False) for event in first),
        ToolResultReport(message=result),
        *(StreamEvent(request_id=f"req_{session}_{turn}_b", event=event, execute_tools=False) for event in final),
    ]


TURN_EVENTS = len(_turn("session", 0))
"""Ingress entries per agent turn of the turn mix."""


def turn_workload(events: int, sessions: int, *, staggered: bool = False) -> list[tuple[str, IngressEnvelope]]:
    """Realistic mix: whole turns (22 events each, mostly stream events), sessions interleaved.

    Lockstep by default (event i of every session, then event i + 1): every session finishes its replies
    at the same moment, the worst case for bursts. ``staggered`` spreads the sessions' phases evenly over
    one turn, as independent conversations are (each session's own order is kept either way).
    """
    per_session: list[list[tuple[str, IngressEnvelope]]] = []
    turns = max(1, round(events / sessions / TURN_EVENTS))
    for number in range(sessions):
        session = f"bench-{number}"
        payloads = [payload for turn in range(turns) for payload in _turn(session, turn)]
        per_session.append(
            [
                (session, IngressEnvelope(session_id=session, idempotency_key=f"{session}:{i}", payload=payload))
                for i, payload in enumerate(payloads)
            ]
        )
    if not staggered:
        return [item for step in zip(*per_session, strict=True) for item in step]
    # Session n's event j happens at j + n·(turn length / sessions): one turn's worth of phase spread.
    timed = [
        (index + number * TURN_EVENTS / sessions, number, item)
        for number, items in enumerate(per_session)
        for index, item in enumerate(items)
    ]
    return [item for _, _, item in sorted(timed, key=lambda row: (row[0], row[1]))]


WORKLOADS: dict[str, Callable[[int, int], list[tuple[str, IngressEnvelope]]]] = {
    "turns": turn_workload,
    "prompts": prompt_workload,
}


def paced_workload(mix: str, events: int, sessions: int, *, prefix: str) -> list[tuple[str, IngressEnvelope]]:
    """The paced run's traffic: sessions ``<prefix>-bench-N``, turns with their phases spread (or prompts)."""
    workload = turn_workload(events, sessions, staggered=True) if mix == "turns" else prompt_workload(events, sessions)
    return [(f"{prefix}-{s}", e.model_copy(update={"session_id": f"{prefix}-{s}"})) for s, e in workload]


SETTLED_SCRIPT = ServerScript("""
local function behind(a, b)
  local am, as = string.match(a, '(%d+)-(%d+)')
  local bm, bs = string.match(b, '(%d+)-(%d+)')
  am, as, bm, bs = tonumber(am), tonumber(as), tonumber(bm), tonumber(bs)
  return am < bm or (am == bm and as < bs)
end
local log_streams = tonumber(ARGV[1])
for i = 1, #KEYS do
  local stream = redis.call('XINFO', 'STREAM', KEYS[i])
  local last = '0-0'
  for j = 1, #stream, 2 do if stream[j] == 'last-generated-id' then last = stream[j + 1] end end
  for _, group in ipairs(redis.call('XINFO', 'GROUPS', KEYS[i])) do
    local info = {}
    for j = 1, #group, 2 do info[group[j]] = group[j + 1] end
    local watched = i > log_streams or info['name'] == ARGV[2] or info['name'] == ARGV[3]
    if watched and (info['pending'] ~= 0 or behind(info['last-delivered-id'], last)) then return 0 end
  end
end
return 1
""")
"""1 when every ingress entry is consumed and the normalization and transcript groups have settled: the rule of
``agentbus_redis.streams.drain.group_drained`` (last-delivered-id reached the stream's last-generated-id, nothing
pending; never XINFO's ``lag``, which Redis 7.0 can report forever after an AOF rewrite), run in one script."""


async def settled(redis: aioredis.Redis, topology: Topology) -> bool:
    """Whether the pipeline has drained, asked in ONE script call.

    This poll runs on the same two cores as the workers it waits for: sixteen ``XINFO GROUPS`` replies parsed
    by redis-py cost ~0.4 ms of CPU per poll (~7% of a core at one poll per 5 ms, ≈ 6 µs per event taken
    from the system under test), a cost the raw chain's end signal does not have."""
    if isinstance(redis, RedisCluster):  # one call per shard: a script's keys must share a slot
        shards = range(topology.shards)
        per_shard: list[Arg] = [1, NORMALIZATION_GROUP, TRANSCRIPTS_GROUP]
        calls = [SETTLED_SCRIPT.run(redis, [topology.log(s), topology.ingress(s)], per_shard) for s in shards]
        return all(await asyncio.gather(*calls))
    keys = [*topology.names.shard_streams("log"), *topology.names.shard_streams("ingress")]
    args: list[Arg] = [len(topology.names.shard_streams("log")), NORMALIZATION_GROUP, TRANSCRIPTS_GROUP]
    return bool(await SETTLED_SCRIPT.run(redis, keys, args))


SETTLED_POLL_S = 0.005
"""How often the saturation run asks whether the pipeline has drained: ≤ 0.4% of a ~1.5 s run."""


async def saturate(batch: list[tuple[str, IngressEnvelope]], redis_url: str) -> float:
    names = StreamNames(prefix="agentbus:", shards=SHARDS)
    async with AgentbusClient.connect(redis_url, names=names) as bus:
        started = time.perf_counter()
        for start in range(0, len(batch), 100):
            pipe = bus.redis.pipeline(transaction=False)
            for session, envelope in batch[start : start + 100]:
                pipe.xadd(bus.topology.ingress_for(session), {"data": envelope.to_wire_json()})
            await pipe.execute()
        while not await settled(bus.redis, bus.topology):
            await asyncio.sleep(SETTLED_POLL_S)
        return len(batch) / (time.perf_counter() - started)


async def paced(batch: list[tuple[str, IngressEnvelope]], redis_url: str, rate: float) -> int:
    names = StreamNames(prefix="agentbus:", shards=SHARDS)
    async with AgentbusClient.connect(redis_url, names=names) as bus:
        started = time.perf_counter()
        for index, (session, envelope) in enumerate(batch):
            due = started + index / rate
            delay = due - time.perf_counter()
            if delay > 0:
                await asyncio.sleep(delay)
            await bus.redis.xadd(bus.topology.ingress_for(session), {"data": envelope.to_wire_json()})
        while not await settled(bus.redis, bus.topology):
            await asyncio.sleep(0.01)
        return len(batch)


def latency_buckets(port: int, stage: str = "transcript_durable") -> list[tuple[float, float]]:
    """The cumulative buckets of the transcript worker's end-to-end latency histogram for ``stage``."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as reply:
        text = reply.read().decode()
    buckets: list[tuple[float, float]] = []
    for line in text.splitlines():
        if line.startswith("agentbus_end_to_end_latency_seconds_bucket") and f'stage="{stage}"' in line:
            bound = line.split('le="', 1)[1].split('"', 1)[0]
            buckets.append((float("inf") if bound == "+Inf" else float(bound), float(line.rsplit(" ", 1)[1])))
    return sorted(buckets)


GOAL_BOUND_S = 0.010
"""Issue 4's latency goal, p99 ≤ 10 ms: a bucket bound of the histogram, so the share of events within it
is exact where the interpolated p99 is not (the next bound is 25 ms)."""


def window_quantiles(before: list[tuple[float, float]], after: list[tuple[float, float]]) -> dict[str, float]:
    """p50/p99 in ms of the events observed between two scrapes (linear interpolation in a bucket), and
    the share of them within :data:`GOAL_BOUND_S` (``within_goal``)."""
    earlier = dict(before)
    buckets = [(bound, count - earlier.get(bound, 0.0)) for bound, count in after]
    total = buckets[-1][1] if buckets else 0.0
    result: dict[str, float] = {"count": total}
    within = dict(buckets).get(GOAL_BOUND_S)
    if within is not None and total:
        result["within_goal"] = within / total
    for name, quantile in (("p50_ms", 0.5), ("p99_ms", 0.99)):
        target, lower_bound, lower_count = quantile * total, 0.0, 0.0
        for bound, count in buckets:
            if count >= target and total:
                span = count - lower_count
                fraction = (target - lower_count) / span if span else 1.0
                upper = bound if bound != float("inf") else lower_bound
                result[name] = (lower_bound + fraction * (upper - lower_bound)) * 1000
                break
            lower_bound, lower_count = bound, count
    return result


@dataclass
class Target:
    """What the workers run against: one Redis or a cluster (its URL, how to empty it, its server processes)."""

    url: str
    flush: Callable[[], None]
    server_pids: list[int]

    def redis_cpu_s(self) -> float:
        return sum(_cpu_s(pid) for pid in self.server_pids)


def single_target(server: LocalRedis) -> Target:
    assert server.process is not None
    return Target(server.url, lambda: asyncio.run(_flush(server.url)), [server.process.pid])


def cluster_target(nodes: LocalRedisCluster) -> Target:
    return Target(nodes.url, nodes.flushall, [node.process.pid for node in nodes.nodes if node.process is not None])


def saturation_round(
    server: LocalRedis | Target, root: Path, batch: list[tuple[str, IngressEnvelope]], *, metrics: bool
) -> dict[str, float]:
    """One saturation run on fresh workers and an empty Redis: events/s and CPU µs/event of all workers (and of
    the Redis server processes, ``redis_cpu_us_per_event``)."""
    target = server if isinstance(server, Target) else single_target(server)
    target.flush()
    # A fresh data dir too: files left by an earlier round would turn this round's appends into de-dup skips.
    workers = start_workers(target.url, Path(tempfile.mkdtemp(prefix="round-", dir=root)), metrics=metrics)
    try:
        cpu_before = {name: _user_kernel_s(pid) for name, pid in workers.pids().items()}
        redis_before = target.redis_cpu_s()
        rate = asyncio.run(saturate(batch, target.url))
        cpu_after = {name: _user_kernel_s(pid) for name, pid in workers.pids().items()}
        cpu = {name: (sum(cpu_after[name]) - sum(cpu_before[name])) * 1e6 / len(batch) for name in cpu_after}
        kernel = {name: (cpu_after[name][1] - cpu_before[name][1]) * 1e6 / len(batch) for name in cpu_after}
        redis_cpu = (target.redis_cpu_s() - redis_before) * 1e6 / len(batch)
    finally:
        workers.stop()
    return {
        "events_per_s": rate,
        "cpu_us_per_event": sum(cpu.values()),
        "redis_cpu_us_per_event": redis_cpu,
        **{f"cpu_us_{n}": v for n, v in cpu.items()},
        **{f"kernel_us_{n}": v for n, v in kernel.items()},
    }


def paced_round(
    target: Target, root: Path, pacing: list[tuple[str, IngressEnvelope]], warmup: list[Any], rate: float
) -> dict[str, Any]:
    """Latency at ``rate`` on fresh workers after warm-up traffic: the transcript worker's histogram window."""
    target.flush()
    workers = start_workers(target.url, Path(tempfile.mkdtemp(prefix="paced-", dir=root)))
    try:
        if warmup:
            asyncio.run(paced(warmup, target.url, rate))
        before = latency_buckets(workers.ports["transcripts"])
        redis_before = target.redis_cpu_s()
        asyncio.run(paced(pacing, target.url, rate))
        return {
            "latency": window_quantiles(before, latency_buckets(workers.ports["transcripts"])),
            "redis_cpu_us_per_event": (target.redis_cpu_s() - redis_before) * 1e6 / len(pacing),
        }
    finally:
        workers.stop()


def cluster_comparison(args: argparse.Namespace, root: Path) -> None:
    """``--cluster``: one Redis vs a 3-master cluster, same workload, same run (see the module docstring)."""
    saturation = WORKLOADS[args.mix](args.events, args.sessions)
    pacing = paced_workload(args.mix, int(args.rate * args.seconds), args.paced_sessions, prefix="paced")
    warmup = paced_workload(args.mix, int(args.rate * args.warmup_seconds), args.paced_sessions, prefix="warmup")
    server = start_local_redis(root / "redis", appendonly=args.aof)
    nodes = start_local_cluster(root / "cluster")
    targets = {"single": single_target(server), "cluster": cluster_target(nodes)}
    results: dict[str, Any] = {"events": len(saturation), "sessions": args.sessions, "mix": args.mix, "shards": SHARDS}
    try:
        rounds: list[dict[str, Any]] = []
        for _ in range(args.rounds):
            single = saturation_round(targets["single"], root, saturation, metrics=True)
            cluster = saturation_round(targets["cluster"], root, saturation, metrics=True)
            rounds.append(
                {"single": single, "cluster": cluster, "ratio": cluster["events_per_s"] / single["events_per_s"]}
            )
        results["rounds"] = rounds
        for name in targets:
            results[f"{name}_events_per_s"] = statistics.median(r[name]["events_per_s"] for r in rounds)
            results[f"{name}_redis_cpu_us_per_event"] = statistics.median(
                r[name]["redis_cpu_us_per_event"] for r in rounds
            )
            results[f"{name}_worker_cpu_us_per_event"] = statistics.median(r[name]["cpu_us_per_event"] for r in rounds)
        results["throughput_ratio"] = statistics.median(r["ratio"] for r in rounds)
        for name, target in targets.items():
            results[f"{name}_paced"] = paced_round(target, root, pacing, warmup, args.rate)
    finally:
        server.stop()
        nodes.stop()
    print(json.dumps(results, indent=2))
    print(
        f"\nthroughput: cluster {results['cluster_events_per_s']:,.0f} ev/s vs single "
        f"{results['single_events_per_s']:,.0f} ev/s (medians of {args.rounds} alternating rounds) → ratio "
        f"{results['throughput_ratio']:.2f} (goal ≥ 0.8)"
    )
    for name in targets:
        latency = results[f"{name}_paced"]["latency"]
        print(
            f"{name}: latency at {args.rate:,.0f} ev/s p50 {latency.get('p50_ms', float('nan')):.1f} ms, "
            f"p99 {latency.get('p99_ms', float('nan')):.1f} ms; Redis CPU "
            f"{results[f'{name}_redis_cpu_us_per_event']:.1f} µs/event at saturation, "
            f"{results[f'{name}_paced']['redis_cpu_us_per_event']:.1f} µs/event paced"
        )


def metrics_cost(
    server: LocalRedis, root: Path, batch: list[tuple[str, IngressEnvelope]], rounds: int
) -> dict[str, Any]:
    """Issue 5: throughput and CPU with metrics on vs off, alternating rounds (medians), same run."""
    on: list[dict[str, float]] = []
    off: list[dict[str, float]] = []
    for _ in range(rounds):
        on.append(saturation_round(server, root, batch, metrics=True))
        off.append(saturation_round(server, root, batch, metrics=False))

    def median(rows: list[dict[str, float]], key: str) -> float:
        return statistics.median(row[key] for row in rows)

    return {
        "rounds": rounds,
        "on_events_per_s": median(on, "events_per_s"),
        "off_events_per_s": median(off, "events_per_s"),
        "on_cpu_us_per_event": median(on, "cpu_us_per_event"),
        "off_cpu_us_per_event": median(off, "cpu_us_per_event"),
        "throughput_on_over_off": median(on, "events_per_s") / median(off, "events_per_s"),
        "cpu_on_over_off": median(on, "cpu_us_per_event") / median(off, "cpu_us_per_event"),
    }


THROUGHPUT_GOALS = {"turns": "0.8", "prompts": "0.5"}
"""Issue 31's throughput goals against the raw chain, per mix."""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--events", type=int, default=20_000)
    parser.add_argument("--sessions", type=int, default=500)
    parser.add_argument("--rate", type=float, default=1000.0)
    parser.add_argument("--seconds", type=float, default=10.0)
    parser.add_argument(
        "--paced-sessions",
        type=int,
        default=20,
        help="sessions of the paced (latency) run: 20 live sessions each streaming ~50 events/s make 1k/s; "
        "with many more, every session is new and each event also pays its session's first-time costs",
    )
    parser.add_argument(
        "--warmup-seconds",
        type=float,
        default=1.0,
        help="paced traffic on other sessions before the latency window (0: measure from a cold start)",
    )
    parser.add_argument("--aof", action="store_true", help="Redis with appendonly everysec (production setting)")
    parser.add_argument(
        "--mix", choices=sorted(WORKLOADS), default="turns", help="turns: realistic; prompts: worst case"
    )
    parser.add_argument("--rounds", type=int, default=3, help="alternating raw / agentbus saturation rounds")
    parser.add_argument(
        "--metrics-rounds",
        type=int,
        default=0,
        help="also price the metrics: N alternating saturation rounds with AGENTBUS_METRICS on / off",
    )
    parser.add_argument(
        "--cluster", action="store_true", help="one Redis vs a 3-master Redis Cluster instead of the raw chain"
    )
    args = parser.parse_args()
    root = Path(tempfile.mkdtemp(prefix="agentbus-bench-"))
    atexit.register(shutil.rmtree, root, ignore_errors=True)  # the rounds' transcripts: tens of MB a run
    if args.cluster:
        cluster_comparison(args, root)
        return
    server: LocalRedis = start_local_redis(root / "redis", appendonly=args.aof)
    saturation = WORKLOADS[args.mix](args.events, args.sessions)
    pacing = paced_workload(args.mix, int(args.rate * args.seconds), args.paced_sessions, prefix="paced")
    warmup = paced_workload(args.mix, int(args.rate * args.warmup_seconds), args.paced_sessions, prefix="warmup")
    results: dict[str, Any] = {
        "events": len(saturation),
        "sessions": args.sessions,
        "mix": args.mix,
        "hops": HOPS,
        "aof": args.aof,
    }
    try:
        # Alternate raw and agentbus rounds so drifting machine load hits both alike; report medians.
        rounds: list[dict[str, float]] = []
        commandstats: dict[str, list[dict[str, float]]] = {"raw": [], "agentbus": []}
        for _ in range(args.rounds):
            reset_commandstats(server.url)
            raw = run_raw_chain(server.url, hops=HOPS, n=len(saturation))
            commandstats["raw"].append(commandstats_us_per_event(server.url, len(saturation)))
            reset_commandstats(server.url)
            ours = saturation_round(server, root, saturation, metrics=True)
            commandstats["agentbus"].append(commandstats_us_per_event(server.url, len(saturation)))
            raw_hop_cpu = statistics.median(raw.cpu_us_per_event[f"hop{hop}"] for hop in range(1, HOPS + 1))
            raw_hop_kernel = statistics.median(raw.kernel_us_per_event[f"hop{hop}"] for hop in range(1, HOPS + 1))
            rounds.append(
                {
                    "raw_events_per_s": raw.events_per_s,
                    "raw_hop_cpu_us": raw_hop_cpu,
                    "raw_hop_kernel_us": raw_hop_kernel,
                    "raw_redis_cpu_us_per_event": raw.cpu_us_per_event["redis"],
                    **ours,
                    "ratio": ours["events_per_s"] / raw.events_per_s,
                }
            )
        results["rounds"] = rounds
        results["raw_events_per_s"] = statistics.median(r["raw_events_per_s"] for r in rounds)
        results["agentbus_events_per_s"] = statistics.median(r["events_per_s"] for r in rounds)
        results["throughput_ratio"] = statistics.median(r["ratio"] for r in rounds)
        results["cpu_us_per_event"] = {
            name: round(statistics.median(r[f"cpu_us_{name}"] for r in rounds), 1)
            for name in ("ingestion", "normalization", "transcripts")
        }
        # What one raw hop (decode, stamp, encode, XADD, XACK) costs on this machine: the same-run yardstick for the
        # workers' CPU per event, whose absolute µs move with the machine (issue 31).
        results["raw_hop_cpu_us_per_event"] = round(statistics.median(r["raw_hop_cpu_us"] for r in rounds), 1)
        # Of those, the time in the kernel (system calls: sockets, the transcripts' files and syncfs): instructions
        # counted by bench/instructions.py do not include it, and a machine with slow system calls inflates it.
        results["kernel_us_per_event"] = {
            name: round(statistics.median(r[f"kernel_us_{name}"] for r in rounds), 1)
            for name in ("ingestion", "normalization", "transcripts")
        }
        results["raw_hop_kernel_us_per_event"] = round(statistics.median(r["raw_hop_kernel_us"] for r in rounds), 1)
        # Redis runs on the same 2 cores: its CPU per event is part of what the throughput ratio compares.
        results["redis_cpu_us_per_event"] = {
            side: round(statistics.median(r[key] for r in rounds), 1)
            for side, key in (("agentbus", "redis_cpu_us_per_event"), ("raw", "raw_redis_cpu_us_per_event"))
        }
        # Where Redis's CPU goes, by command (INFO commandstats; a script's inner commands are counted under their
        # own names and inside the script's time too): what is left of the Redis CPU is reading, parsing and
        # answering the calls themselves.
        results["redis_commands_us_per_event"] = {side: median_by_command(rows) for side, rows in commandstats.items()}
        raw_paced = run_raw_chain(server.url, hops=HOPS, n=int(args.rate * args.seconds), rate=args.rate)
        results["raw_paced_p50_ms"], results["raw_paced_p99_ms"] = raw_paced.p50_ms, raw_paced.p99_ms
        results["sync_p50_ms"], results["sync_p99_ms"] = sync_latency_ms(root)
        asyncio.run(_flush(server.url))
        workers = start_workers(server.url, root)
        try:
            if warmup:
                asyncio.run(paced(warmup, server.url, args.rate))
            before = latency_buckets(workers.ports["transcripts"])
            before_log = latency_buckets(workers.ports["transcripts"], "log_written")
            cpu_before = {name: _cpu_s(pid) for name, pid in workers.pids().items()}
            results["paced_events"] = asyncio.run(paced(pacing, server.url, args.rate))
            results["paced_cpu_us_per_event"] = {
                name: round((_cpu_s(pid) - cpu_before[name]) * 1e6 / len(pacing), 1)
                for name, pid in workers.pids().items()
            }
            results["paced_latency"] = window_quantiles(before, latency_buckets(workers.ports["transcripts"]))
            results["paced_log_written"] = window_quantiles(
                before_log, latency_buckets(workers.ports["transcripts"], "log_written")
            )
        finally:
            workers.stop()
        if args.metrics_rounds:
            results["metrics_cost"] = metrics_cost(server, root, saturation, args.metrics_rounds)
    finally:
        server.stop()
    print(json.dumps(results, indent=2))
    print(
        f"\nthroughput: agentbus {results['agentbus_events_per_s']:,.0f} ev/s vs raw {HOPS}-hop chain "
        f"{results['raw_events_per_s']:,.0f} ev/s (medians of {args.rounds} alternating rounds) → ratio "
        f"{results['throughput_ratio']:.2f} (median of the rounds' ratios; goal ≥ {THROUGHPUT_GOALS[args.mix]})"
    )
    cpu, redis_cpu = results["cpu_us_per_event"], results["redis_cpu_us_per_event"]
    print(
        f"CPU µs per event (medians): ingestion {cpu['ingestion']}, normalization {cpu['normalization']}, "
        f"transcripts {cpu['transcripts']}, Redis {redis_cpu['agentbus']}; raw chain: a hop "
        f"{results['raw_hop_cpu_us_per_event']}, Redis {redis_cpu['raw']}"
    )
    kernel = results["kernel_us_per_event"]
    print(
        f"  of which in the kernel (system calls): ingestion {kernel['ingestion']}, normalization "
        f"{kernel['normalization']}, transcripts {kernel['transcripts']}; "
        f"a raw hop {results['raw_hop_kernel_us_per_event']}"
    )
    for side, by_command in results["redis_commands_us_per_event"].items():
        top = ", ".join(f"{command} {us}" for command, us in list(by_command.items())[:8])
        print(f"  Redis µs per event by command, {side}: {top}")
    latency = results["paced_latency"]
    p50, p99 = latency.get("p50_ms", float("nan")), latency.get("p99_ms", float("nan"))
    raw_p50, raw_p99 = results["raw_paced_p50_ms"], results["raw_paced_p99_ms"]
    print(
        f"latency at {args.rate:,.0f} ev/s, ingress → durable transcript: p50 {p50:.1f} ms, p99 {p99:.1f} ms "
        f"(goal p99 ≤ 2× the raw chain's); raw chain p50 {raw_p50:.1f} ms, p99 {raw_p99:.1f} ms"
    )
    print(
        f"  durable within 10 ms: {latency.get('within_goal', float('nan')):.2%} of the events (goal ≥ 99%), "
        f"after {args.warmup_seconds:g} s of warm-up traffic"
    )
    logged = results["paced_log_written"]
    print(
        f"  of which ingress → canonical log (ingestion): p50 {logged.get('p50_ms', float('nan')):.1f} ms, "
        f"p99 {logged.get('p99_ms', float('nan')):.1f} ms ({args.paced_sessions} sessions): "
        f"{logged.get('p99_ms', float('nan')) / raw_p99:.1f}× the raw chain's p99, which writes no file"
    )
    print(
        f"  the floor under durable: one syncfs on this disk, p50 {results['sync_p50_ms']:.1f} ms, "
        f"p99 {results['sync_p99_ms']:.1f} ms (plus up to the group-commit window, AGENTBUS_FSYNC_INTERVAL_MS)"
    )
    if "metrics_cost" in results:
        cost = results["metrics_cost"]
        print(
            f"metrics on/off over {cost['rounds']} alternating rounds (medians): throughput "
            f"{cost['on_events_per_s']:,.0f} vs {cost['off_events_per_s']:,.0f} ev/s → "
            f"{cost['throughput_on_over_off']:.3f}; CPU {cost['on_cpu_us_per_event']:.0f} vs "
            f"{cost['off_cpu_us_per_event']:.0f} µs/event → {cost['cpu_on_over_off']:.3f} (goal: drop ≤ 5%)"
        )


def reset_commandstats(url: str) -> None:
    with redis.Redis.from_url(url) as client:
        client.config_resetstat()


def commandstats_us_per_event(url: str, events: int) -> dict[str, float]:
    """Each command's total execution time since :func:`reset_commandstats`, in µs per event."""
    with redis.Redis.from_url(url) as client:
        stats: dict[str, Any] = client.info("commandstats")
    return {name.removeprefix("cmdstat_"): row["usec"] / events for name, row in stats.items()}


def median_by_command(rows: list[dict[str, float]]) -> dict[str, float]:
    """The rounds' median µs per event of each command, largest first."""
    commands = {command for row in rows for command in row}
    medians = {command: statistics.median(row.get(command, 0.0) for row in rows) for command in commands}
    return {command: round(us, 2) for command, us in sorted(medians.items(), key=lambda item: -item[1])}


def _cpu_s(pid: int) -> float:
    """User + system CPU seconds of a process (from /proc)."""
    return sum(_user_kernel_s(pid))


def _user_kernel_s(pid: int) -> tuple[float, float]:
    """User and system (kernel: system calls, sockets, files, fsync) CPU seconds of a process (from /proc)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    tick = os.sysconf("SC_CLK_TCK")
    return int(fields[11]) / tick, int(fields[12]) / tick


def sync_latency_ms(directory: Path, appends: int = 200) -> tuple[float, float]:
    """p50 and p99 of appending a transcript-sized line to a file in ``directory`` and making it durable as the
    transcript worker does by default (one ``syncfs`` of the filesystem, ``AGENTBUS_TRANSCRIPT_SYNC=syncfs``):
    the floor under "durable" that the raw chain, which writes no file, does not pay."""
    syncfs = ctypes.CDLL(None, use_errno=True).syncfs
    path = directory / "sync-probe.jsonl"
    times = []
    descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    try:
        for _ in range(appends):
            os.write(descriptor, b"x" * 400 + b"\n")
            started = time.perf_counter()
            if syncfs(descriptor) != 0:
                raise OSError(ctypes.get_errno(), "syncfs failed")
            times.append((time.perf_counter() - started) * 1000)
    finally:
        os.close(descriptor)
        path.unlink()
    times.sort()
    return times[len(times) // 2], times[int(len(times) * 0.99)]


async def _flush(url: str) -> None:
    client = aioredis.Redis.from_url(url)
    await client.flushall()
    await client.aclose()


if __name__ == "__main__":
    main()
