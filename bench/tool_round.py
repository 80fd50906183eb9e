"""A tool round through the bus against running the tool directly (issue 31), p50 and p99, idle and loaded.

    uv run python bench/tool_round.py                          # ~1 minute: idle, then 500 concurrent sessions
    uv run python bench/tool_round.py --rounds 60 --sessions 100

Setup: a private Redis and one process each of ingestion, tools and normalization (the shipped defaults, the
tools' workspace shared by every session, ``Read`` allowed as it is by default). The model's reply is sent as
the model worker sends a complete one (``AssistantReply`` with a ``Read`` tool_use of a 20-line file in the
workspace); a session's prompt and first request come before the measured rounds.

A round, seen by one observer in this process that reads every shard's ``log`` and ``requests`` streams with
one blocking ``XREAD`` (so the three moments share its wake-up latency):

- **use**: the assistant message with the tool_use is in the canonical log (ingestion logged it and handed
  out the tool job);
- **result**: the tool's result is in the log (the tools worker ran the call and reported it; ingestion
  logged it);
- **request**: the session's next API request is published (the normalizer's ``RequestReady``).

The round is **request − use**; the figure is its added time over the **direct** call: the same ``ReadTool``
called in this process on the same file (p50 of as many calls), i.e. what the bus adds to a tool round.
Goal (issue 31): added ≤ 5 ms p50 at idle. Also printed: each worker's CPU per idle round (``/proc``, less the
CPU its idle loops burn, measured on a quiet bus just before), which bounds what the round can take on a
machine with cores to spare. ``--sessions N`` runs N sessions concurrently, each doing
``--loaded-rounds`` rounds back to back (closed loop: a session sends its next reply when its request is in),
so the loaded figures include the queueing of N rounds in flight on this 2-core box.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson
import redis.asyncio as aioredis

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from agentbus_redis.local.redis_server import free_port, start_local_redis
from agentbus_redis.messages.content import TextBlock, ToolUseBlock
from agentbus_redis.messages.factories import create_assistant_message
from agentbus_redis.runtime import redis_client
from agentbus_redis.sdk.client import AgentbusClient
from agentbus_redis.streams.names import StreamNames
from agentbus_redis.streams.topology import Topology
from agentbus_redis.tools.tool import ToolContext
from agentbus_redis.workers.tools.builtin.read import ReadInput, ReadTool
from agentbus_redis.workers.tools.workspace import Workspace
from bench.pipeline import Workers

SHARDS = 8
FILE = "notes.txt"
QUIET_S = 2.0
USE = re.compile(rb'"id":"(toolu_b\w+)"')
RESULT = re.compile(rb'"tool_use_id":"(toolu_b\w+)"')


@dataclass
class Round:
    session: str
    after_seq: int
    use: float | None = None
    result: float | None = None
    request: float | None = None
    done: asyncio.Event = field(default_factory=asyncio.Event)


class Observer:
    """Reads every shard's log and requests streams in one blocking XREAD; stamps the rounds' moments."""

    def __init__(self, redis: aioredis.Redis, topology: Topology) -> None:
        self.redis = redis
        self.log_streams = set(topology.names.shard_streams("log"))
        self.cursors: dict[str, bytes | str] = dict.fromkeys([*self.log_streams, *topology.request_streams()], "$")
        self.by_tool: dict[bytes, Round] = {}
        self.by_session: dict[str, Round] = {}
        self.requests: dict[str, int] = {}
        self.requested = asyncio.Condition()

    async def start(self) -> None:
        for stream in self.cursors:  # from each stream's current end, fixed now (not "$" at every read)
            last: Any = await self.redis.xrevrange(stream, count=1)
            self.cursors[stream] = last[0][0] if last else b"0-0"

    async def run(self) -> None:
        while True:
            rows: Any = await self.redis.xread(self.cursors, block=1000, count=1000)  # type: ignore[arg-type]
            now = time.perf_counter()
            for raw_stream, entries in rows:
                stream = raw_stream.decode()
                self.cursors[stream] = entries[-1][0]
                for _, fields in entries:
                    data: bytes = fields[b"data"]
                    if stream in self.log_streams:
                        self._logged(data, now)
                    else:
                        notice = orjson.loads(data)
                        await self._requested(notice["session_id"], int(notice["seq"]), now)

    def _logged(self, data: bytes, now: float) -> None:
        for match in RESULT.finditer(data):
            if (current := self.by_tool.get(match.group(1))) is not None and current.result is None:
                current.result = now
        for match in USE.finditer(data):
            if (current := self.by_tool.get(match.group(1))) is not None and current.use is None:
                current.use = now

    async def _requested(self, session: str, seq: int, now: float) -> None:
        async with self.requested:
            self.requests[session] = max(seq, self.requests.get(session, 0))
            self.requested.notify_all()
        current = self.by_session.get(session)
        if current is not None and current.result is not None and seq > current.after_seq and current.request is None:
            current.request = now
            current.done.set()

    async def wait_request(self, session: str, after_seq: int) -> int:
        async with self.requested:
            await self.requested.wait_for(lambda: self.requests.get(session, 0) > after_seq)
            return self.requests[session]


async def session_rounds(bus: AgentbusClient, observer: Observer, session: str, rounds: int) -> list[Round]:
    """A prompt and its request (not measured), then ``rounds`` tool rounds back to back."""
    await bus.send_prompt(session, f"read {FILE}")
    seq = await asyncio.wait_for(observer.wait_request(session, 0), 120)
    done: list[Round] = []
    for number in range(rounds):
        tool_id = f"toolu_b{session.replace('-', '')}r{number}"
        current = Round(session, after_seq=seq)
        observer.by_tool[tool_id.encode()] = current
        observer.by_session[session] = current
        call = ToolUseBlock(id=tool_id, name="Read", input={"file_path": FILE})
        await bus.send_assistant(session, create_assistant_message([TextBlock(text="Reading."), call]))
        await asyncio.wait_for(current.done.wait(), 120)
        seq = observer.requests[session]
        done.append(current)
    return done


async def direct_calls(workspace: Path, count: int) -> list[float]:
    """Seconds per ``ReadTool`` call made here, on the same file."""
    tool = ReadTool(Workspace.at(workspace))
    times = []
    for number in range(count):
        started = time.perf_counter()
        async for _ in tool.call(ReadInput(file_path=FILE), ToolContext(tool_use_id=f"direct-{number}")):
            pass
        times.append(time.perf_counter() - started)
    return times


def cpu_seconds(pid: int) -> float:
    """utime + stime of ``pid`` (``/proc/<pid>/stat``)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def quantile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def start_workers(redis_url: str, root: Path) -> Workers:
    env = {
        **os.environ,
        "REDIS_URL": redis_url,
        "AGENTBUS_DATA_DIR": str(root / "data"),
        "AGENTBUS_INTERNAL_KEY": "bench-internal-key",
        "AGENTBUS_SHARDS": str(SHARDS),
        "AGENTBUS_TOOLS__WORKSPACE": str(root / "workspace"),
        "AGENTBUS_TOOLS__WORKSPACE_SCOPE": "shared",
        "AGENTBUS_TOOLS__SANDBOX": "off",  # Read runs in the worker; only Bash would use the sandbox
        "AGENTBUS_RETENTION__ENABLED": "false",
        "LOG_LEVEL": "WARNING",
    }
    processes, ports = [], {}
    for name in ("ingestion", "tools", "normalization"):
        port = free_port()
        ports[name] = port
        entry = ["-m", "agentbus_redis.cli.main"]
        if os.environ.get("BENCH_PROFILE"):  # cProfile each worker into <root>/<name>.prof (bench/profiled_worker.py)
            entry = [str(Path(__file__).with_name("profiled_worker.py")), str(root / f"{name}.prof")]
        command = [sys.executable, *entry, "worker", name, "--port", str(port)]
        processes.append(subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))
    workers = Workers(processes, ports)
    workers.wait_ready(timeout_s=180)
    return workers


def summary(label: str, rounds: list[Round], direct_p50: float) -> str:
    total = [(r.request - r.use) * 1000 for r in rounds if r.request is not None and r.use is not None]
    tool = [(r.result - r.use) * 1000 for r in rounds if r.result is not None and r.use is not None]
    request = [(r.request - r.result) * 1000 for r in rounds if r.request is not None and r.result is not None]
    p50, p99 = statistics.median(total), quantile(total, 0.99)
    return (
        f"{label:22} {len(total):6} {p50:8.2f} {p99:8.2f} {p50 - direct_p50:+8.2f} {p99 - direct_p50:+8.2f}"
        f"   {statistics.median(tool):7.2f} {statistics.median(request):7.2f}"
    )


async def run(args: argparse.Namespace) -> None:
    root = Path(tempfile.mkdtemp(prefix="agentbus-bench-tool-round-"))
    (root / "workspace").mkdir()
    (root / "workspace" / FILE).write_text("".join(f"line {n} of the notes\n" for n in range(20)))
    server = start_local_redis(root / "redis")
    workers = start_workers(server.url, root)
    names = StreamNames(prefix="agentbus:", shards=SHARDS)
    rows = []
    loaded_figures: dict[str, dict[str, float]] = {}
    try:
        direct = await direct_calls(root / "workspace", max(args.rounds, 50))
        direct_p50 = statistics.median(direct) * 1000
        async with AgentbusClient.connect(server.url, names=names) as bus:
            # The bus's client, not redis-py's defaults: its observer loop ends only by being cancelled, and on
            # Python 3.11 the default socket timeout loses cancels (runtime/redis_client.py): the bench hung here.
            observer_redis = redis_client.connect(server.url)
            observer = Observer(observer_redis, bus.topology)
            await observer.start()
            watching = asyncio.create_task(observer.run())
            try:
                await session_rounds(bus, observer, "warmup", 5)
                pids = workers.pids()
                quiet = {name: cpu_seconds(pid) for name, pid in pids.items()}
                await asyncio.sleep(QUIET_S)  # the workers' idle loops alone, to take out of the rounds' CPU
                busy = {name: cpu_seconds(pid) for name, pid in pids.items()}
                idle_started = time.perf_counter()
                idle = await session_rounds(bus, observer, "idle", args.rounds)
                idle_s = time.perf_counter() - idle_started
                cpu_ms = {
                    name: (cpu_seconds(pid) - busy[name] - (busy[name] - quiet[name]) * idle_s / QUIET_S) * 1000
                    for name, pid in pids.items()
                }
                rows.append(summary("idle (1 session)", idle, direct_p50))
                for count in args.sessions:
                    started = time.perf_counter()
                    per_session = await asyncio.gather(
                        *(session_rounds(bus, observer, f"s{count}-{n}", args.loaded_rounds) for n in range(count))
                    )
                    seconds = time.perf_counter() - started
                    loaded = [r for rounds in per_session for r in rounds]
                    rows.append(summary(f"{count} sessions", loaded, direct_p50))
                    totals = [(r.request - r.use) * 1000 for r in loaded if r.request is not None and r.use is not None]
                    loaded_figures[str(count)] = {
                        "p50_ms": statistics.median(totals),
                        "p99_ms": quantile(totals, 0.99),
                        "rounds_per_s": len(loaded) / seconds,
                    }
                    rows.append(f"{'':22} ({len(loaded) / seconds:.0f} rounds/s over {seconds:.1f} s)")
            finally:
                watching.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await watching
                await observer_redis.aclose()
    finally:
        workers.stop()
        server.stop()
    print(f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores; workers' files in {root}")
    print(f"direct ReadTool call: p50 {direct_p50:.3f} ms, p99 {quantile(direct, 0.99) * 1000:.3f} ms")
    print(f"{'':22} {'rounds':>6} {'p50 ms':>8} {'p99 ms':>8} {'+p50':>8} {'+p99':>8}   {'use→res':>7} {'res→req':>7}")
    print("\n".join(rows))
    print("round = tool_use logged → next request published; +p50/+p99 = round − the direct call's p50")
    per_round = ", ".join(f"{name} {ms / args.rounds:.2f} ms" for name, ms in cpu_ms.items())
    print(f"worker CPU per idle round (their idle loops' CPU, measured {QUIET_S:g} s before, taken out): {per_round}")
    idle_rounds = [(r.request - r.use) * 1000 for r in idle if r.request and r.use]
    idle_added = statistics.median(idle_rounds) - direct_p50
    print(f"goal: added p50 at idle <= 5 ms: {'met' if idle_added <= 5 else 'NOT met'} ({idle_added:+.2f} ms)")
    if args.json:
        figures: dict[str, Any] = {"direct_p50_ms": direct_p50, "idle_added_p50_ms": idle_added}
        figures["idle_added_p99_ms"] = quantile(idle_rounds, 0.99) - direct_p50
        figures["loaded"] = loaded_figures
        figures["cpu_ms_per_round"] = {name: ms / args.rounds for name, ms in cpu_ms.items()}
        Path(args.json).write_text(orjson.dumps(figures).decode())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=60, help="rounds of the idle session")
    parser.add_argument("--sessions", type=int, nargs="*", default=[500], help="concurrent sessions (loaded runs)")
    parser.add_argument("--loaded-rounds", type=int, default=3, help="rounds of each concurrent session")
    parser.add_argument("--json", help="also write the figures to this file (bench/run_all.py)")
    asyncio.run(run(parser.parse_args()))


if __name__ == "__main__":
    main()
