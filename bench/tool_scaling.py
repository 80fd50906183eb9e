"""Tool-worker scaling: N = 1, 2, 4, 8 tool worker processes on a mix of short and long sleeping calls.

    uv run python bench/tool_scaling.py                       # 2-3 minutes, most of it starting workers
    uv run python bench/tool_scaling.py --short-s 0.5 --long-s 4 --jobs-per-worker 48 --workers 1 8

What is measured (issue 15):
- **workload**: ``--jobs-per-worker`` × N tool jobs (weak scaling: each worker has the same share), each
  one Bash call that sleeps — every ``--long-every``-th job ``--long-s`` seconds, the others ``--short-s`` —
  so the box has CPU to spare and the figure is about how the workers use their slots, not the CPU
  (the defaults, 1 s and 6 s, keep a job's own cost — a few round trips, a fork, each a wake-up that
  waits for a core on a busy shared box — small against its sleep: at load averages of 12–25 on 2
  cores, N = 8 measured 0.80 and 0.61 with 0.5 s / 4 s sleeps, 0.90 with 1 s / 6 s);
- **throughput**: jobs from the first XADD until the tool group has read and acked every one;
- **efficiency** = throughput ÷ (N × one worker's throughput), one worker measured in the same run (the
  goal is ≥ 0.85);
- **slot use** = throughput ÷ (N × slots ÷ mean sleep): the share of the slots' time spent sleeping in a
  job (1.0 would be every slot busy all the time; Bash start-up and the tail of the last long calls
  keep it below);
- **per worker**: min–max of the calls each worker ran and of the seconds they ran (a worker whose slots
  drew more long calls takes fewer: the stream hands a job to whichever slot frees first);
- **CPU**: cores the workers and their commands used during the run (``/proc``: the workers' own CPU
  and their reaped children's) — well below the box's cores means the figure is not CPU-bound by them.

Redis is a private one started here; every N runs on fresh workers and an empty Redis.
"""

from __future__ import annotations

import argparse
import asyncio
import atexit
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import redis.asyncio as aioredis

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from agentbus_redis.bus.events import ToolJob
from agentbus_redis.local.redis_server import free_port, start_local_redis
from agentbus_redis.messages.content import ToolUseBlock
from agentbus_redis.runtime.codec import entry_fields
from agentbus_redis.streams.names import StreamNames
from agentbus_redis.streams.topology import TOOLS_GROUP, Topology
from bench.pipeline import Workers, _flush

SHARDS = 8
SESSIONS = 64


@dataclass(frozen=True)
class Mix:
    short_s: float
    long_s: float
    long_every: int

    def sleep_of(self, index: int) -> float:
        return self.long_s if index % self.long_every == 0 else self.short_s

    def mean_s(self) -> float:
        return (self.long_s + (self.long_every - 1) * self.short_s) / self.long_every


def start_tool_workers(redis_url: str, root: Path, count: int, slots: int) -> Workers:
    env = {
        **os.environ,
        "REDIS_URL": redis_url,
        "AGENTBUS_DATA_DIR": str(root / "data"),
        "AGENTBUS_SHARDS": str(SHARDS),
        "AGENTBUS_TOOLS__WORKSPACE": str(root / "workspace"),
        "AGENTBUS_TOOLS__ALLOW": json.dumps(["Bash(sleep:*)"]),
        "AGENTBUS_TOOLS__MAX_CONCURRENT_JOBS": str(slots),
        "LOG_LEVEL": "WARNING",
    }
    processes, ports = [], {}
    for number in range(count):
        port = free_port()
        ports[f"tools-{number}"] = port
        command = [sys.executable, "-m", "agentbus_redis.cli.main", "worker", "tools", "--port", str(port)]
        processes.append(subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
    workers = Workers(processes, ports)
    try:
        workers.wait_ready(timeout_s=120)  # eight processes starting at once on a busy 2-core box
    except BaseException:
        workers.stop()
        raise
    return workers


def jobs_of(count: int, mix: Mix) -> list[ToolJob]:
    now_ms = int(time.time() * 1000)
    jobs = []
    for index in range(count):
        call = ToolUseBlock(id=f"toolu_bench_{index}", name="Bash", input={"command": f"sleep {mix.sleep_of(index)}"})
        jobs.append(
            ToolJob(
                session_id=f"bench-tools-{index % SESSIONS}",
                assistant_uuid=f"assistant-{index}",
                tool_uses=[call],
                dispatched_ms=now_ms,
                deadline_ms=now_ms + 3_600_000,
            )
        )
    return jobs


async def drained(redis: aioredis.Redis, topology: Topology, total: int) -> bool:
    """Every job read by the tool group and acked (over every shard's job stream)."""
    read = 0
    for stream in topology.tool_job_streams():
        for group in await redis.xinfo_groups(stream):
            if group["name"] == TOOLS_GROUP.encode():
                if int(group["pending"]):
                    return False
                read += int(group["entries-read"] or 0)
    return read >= total


async def run_jobs(redis_url: str, jobs: list[ToolJob]) -> float:
    """Seconds from the first XADD until every job is acked."""
    topology = Topology(StreamNames(prefix="agentbus:", shards=SHARDS))
    async with aioredis.Redis.from_url(redis_url) as redis:
        started = time.perf_counter()
        pipe = redis.pipeline(transaction=False)
        for job in jobs:
            pipe.xadd(topology.tool_jobs_for(job.session_id), entry_fields(job))  # type: ignore[arg-type]
        await pipe.execute()
        while not await drained(redis, topology, len(jobs)):
            await asyncio.sleep(0.02)
        return time.perf_counter() - started


def cpu_with_children_s(pid: int) -> float:
    """User + system CPU seconds of a process and of its children it has waited for (``/proc``)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return sum(int(value) for value in fields[11:15]) / os.sysconf("SC_CLK_TCK")


def work_done(port: int) -> tuple[int, float]:
    """Tool calls this worker answered and the seconds they ran (``agentbus_tool_executions_total`` and
    ``agentbus_tool_execution_duration_seconds_sum``, all outcomes)."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as reply:
        lines = reply.read().decode().splitlines()

    def total(prefix: str) -> float:
        return sum(float(line.rsplit(" ", 1)[1]) for line in lines if line.startswith(prefix + "{"))

    return round(total("agentbus_tool_executions_total")), total("agentbus_tool_execution_duration_seconds_sum")


def measure(redis_url: str, root: Path, workers: int, args: argparse.Namespace, mix: Mix) -> dict[str, Any]:
    asyncio.run(_flush(redis_url))
    pool = start_tool_workers(redis_url, Path(tempfile.mkdtemp(prefix=f"n{workers}-", dir=root)), workers, args.slots)
    jobs = jobs_of(workers * args.jobs_per_worker, mix)
    try:
        cpu_before = sum(cpu_with_children_s(pid) for pid in pool.pids().values())
        seconds = asyncio.run(run_jobs(redis_url, jobs))
        cpu = sum(cpu_with_children_s(pid) for pid in pool.pids().values()) - cpu_before
        per_worker = [work_done(port) for port in pool.ports.values()]
    finally:
        pool.stop()
    return {"workers": workers, "jobs_per_s": len(jobs) / seconds, "per_worker": per_worker, "cores": cpu / seconds}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--workers", type=int, nargs="+", default=[1, 2, 4, 8])
    parser.add_argument("--slots", type=int, default=8, help="AGENTBUS_TOOLS__MAX_CONCURRENT_JOBS")
    parser.add_argument("--jobs-per-worker", type=int, default=32)
    parser.add_argument("--short-s", type=float, default=1.0)
    parser.add_argument("--long-s", type=float, default=6.0)
    parser.add_argument("--long-every", type=int, default=4)
    args = parser.parse_args()
    mix = Mix(args.short_s, args.long_s, args.long_every)
    root = Path(tempfile.mkdtemp(prefix="agentbus-tool-scaling-"))
    atexit.register(shutil.rmtree, root, ignore_errors=True)
    server = start_local_redis(root / "redis")
    print(
        f"{args.jobs_per_worker} jobs per worker, {args.slots} slots each; every {args.long_every}th call sleeps "
        f"{args.long_s:g} s, the others {args.short_s:g} s (mean {mix.mean_s():.3f} s)"
    )
    try:
        rows = [measure(server.url, root, workers, args, mix) for workers in args.workers]
    finally:
        server.stop()
    single = next((row["jobs_per_s"] for row in rows if row["workers"] == 1), None)
    header = f"{'N':>3} {'jobs/s':>8} {'efficiency':>10} {'slot use':>8} {'CPU':>6}"
    print(f"{header}  per worker: jobs, busy seconds (min-max)")
    for row in rows:
        n = row["workers"]
        efficiency = f"{row['jobs_per_s'] / (n * single):.2f}" if single else "-"
        slot_use = row["jobs_per_s"] / (n * args.slots / mix.mean_s())
        jobs = [done for done, _ in row["per_worker"]]
        busy = [seconds for _, seconds in row["per_worker"]]
        spread = f"{min(jobs)}-{max(jobs)}, {min(busy):.0f}-{max(busy):.0f} s"
        print(f"{n:>3} {row['jobs_per_s']:>8.2f} {efficiency:>10} {slot_use:>8.2f} {row['cores']:>6.2f}  {spread}")
    print("efficiency = throughput / (N x one worker's throughput, same run); goal >= 0.85")
    print(
        f"CPU: cores used by the workers and their commands (this machine has {os.cpu_count()}); load average now",
        end="",
    )
    print(f" {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
