"""Where each pipeline worker's CPU goes at saturation (issue 31): py-spy samples of the three workers while
``bench/pipeline.py``'s saturation workload runs, grouped into what the work is.

    uv run python bench/pipeline_profile.py                  # turns mix, 100k events
    uv run python bench/pipeline_profile.py --mix prompts    # the prompt-heavy mix
    uv run python bench/pipeline_profile.py --top 15         # and each worker's 15 hottest frames of ours
    uv run python bench/pipeline_profile.py --own 40         # and its 40 functions by own time (any code's)

py-spy (a dev dependency) samples from outside the process, so the workers run unmodified and at full speed
(cProfile, ``BENCH_PROFILE=1 bench/pipeline.py``, slows them several times and skews toward many small calls).
A sample's category is the first rule of :data:`CATEGORIES` that one of its frames matches, innermost frame
first: the time a frame spends in C (a socket write, pydantic-core) counts for the Python frame that called
it. The floor argument of the closing note reads from this table: what share is the Redis round trips every
consumer pays (the raw chain too), what share JSON and validation, what share the bus's own rules.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from agentbus_redis.local.redis_server import start_local_redis
from bench.pipeline import SHARDS, WORKLOADS, _cpu_s, saturate, start_workers

CATEGORIES: list[tuple[str, re.Pattern[str]]] = [
    ("Redis I/O: socket writes, reads, replies", re.compile(r"asyncio/streams\.py|site-packages/redis/|hiredis")),
    ("pydantic: validate (JSON → models)", re.compile(r"model_validate|validate_python|validate_json")),
    ("pydantic: dump (models → JSON)", re.compile(r"model_dump|to_json|dump_json")),
    ("pydantic: model construction and copies", re.compile(r"pydantic/main\.py|wire\.py")),
    ("request build: normalization pipeline", re.compile(r"agentbus_redis/normalize/")),
    ("request validation: API rules", re.compile(r"agentbus_redis/api/")),
    ("session ledger and bus rules", re.compile(r"agentbus_redis/(bus|approvals|agents|streaming)/")),
    ("transcript lines and files", re.compile(r"agentbus_redis/(transcript|transcript_files|pi)/")),
    ("consumer: batching, fencing, settling", re.compile(r"agentbus_redis/runtime/")),
    ("worker handlers", re.compile(r"agentbus_redis/workers/")),
    ("metrics and tracing", re.compile(r"prometheus_client|agentbus_redis/observability/")),
    ("event loop and the rest", re.compile(r".")),
]


def category_of(frames: list[str]) -> str:
    """The category of the innermost frame that has one other than the catch-all."""
    for frame in reversed(frames):
        for name, pattern in CATEGORIES[:-1]:
            if pattern.search(frame):
                return name
    return CATEGORIES[-1][0]


def short(frame: str) -> str:
    frame = re.sub(r"\(\S*/agentbus_redis/", "(", frame)
    return re.sub(r"\(\S*/(site-packages|python3\.\d+)/", "(", frame)


def read_samples(path: Path) -> list[tuple[list[str], int]]:
    """py-spy's ``raw`` output: one ``frame;frame;… count`` line per distinct stack."""
    samples = []
    for line in path.read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        samples.append((stack.split(";"), int(count)))
    return samples


def function_of(frame: str) -> str:
    """A frame without its line: ``name (file.py)``, so a function's lines add up."""
    return re.sub(r":\d+\)$", ")", short(frame))


def report(name: str, samples: list[tuple[list[str], int]], cpu_us: float, top: int, own: int = 0) -> list[str]:
    total = sum(count for _, count in samples) or 1
    by_category: collections.Counter[str] = collections.Counter()
    inclusive: collections.Counter[str] = collections.Counter()
    self_time: collections.Counter[str] = collections.Counter()
    for frames, count in samples:
        by_category[category_of(frames)] += count
        for frame in {short(f) for f in frames if "agentbus_redis/" in f}:
            inclusive[frame] += count
        if frames:
            self_time[function_of(frames[-1])] += count
    lines = [f"\n{name}: {cpu_us:.1f} µs CPU per event, {total} samples"]
    for category, _ in CATEGORIES:
        share = by_category[category] / total
        if share >= 0.005:
            lines.append(f"  {category:52} {share:6.1%}  {share * cpu_us:6.1f} µs")
    if top:
        # The frames every sample passes through (the CLI, the consumer's loop) say nothing: below 80 %.
        below = [(frame, count) for frame, count in inclusive.most_common() if count / total < 0.8][:top]
        lines.append(f"  hottest frames of ours below the consumer loop (inclusive), top {top}:")
        lines += [f"    {count / total:6.1%}  {frame}" for frame, count in below]
    if own:
        # Where the samples end: a function's own time (its lines added up), whoever's code it is.
        lines.append(f"  functions by own time (innermost Python frame), top {own}:")
        lines += [
            f"    {count / total:6.1%}  {count / total * cpu_us:5.1f} µs  {frame}"
            for frame, count in self_time.most_common(own)
        ]
    return lines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mix", choices=sorted(WORKLOADS), default="turns")
    parser.add_argument("--events", type=int, default=100_000)
    parser.add_argument("--sessions", type=int, default=500)
    parser.add_argument("--rate", type=int, default=250, help="py-spy samples per second")
    parser.add_argument("--top", type=int, default=0)
    parser.add_argument("--own", type=int, default=0, help="and each worker's N functions by own time")
    args = parser.parse_args()
    if shutil.which("py-spy") is None:
        sys.exit("py-spy is not on PATH (`uv sync` installs it with the dev dependencies)")
    root = Path(tempfile.mkdtemp(prefix="agentbus-profile-"))
    server = start_local_redis(root / "redis")
    batch = WORKLOADS[args.mix](args.events, args.sessions)
    workers = start_workers(server.url, root)
    spies = []
    try:
        cpu_before = {name: _cpu_s(pid) for name, pid in workers.pids().items()}
        for name, pid in workers.pids().items():
            command = [
                "py-spy",
                "record",
                "-p",
                str(pid),
                "-r",
                str(args.rate),
                "-f",
                "raw",
                "--nonblocking",
                "--full-filenames",
            ]
            spies.append(subprocess.Popen([*command, "-o", str(root / f"{name}.txt")], stdout=subprocess.DEVNULL))
        time.sleep(1.0)  # py-spy attaches before the first event is written
        started = time.perf_counter()
        rate = asyncio.run(saturate(batch, server.url))
        seconds = time.perf_counter() - started
        cpu = {name: (_cpu_s(pid) - cpu_before[name]) * 1e6 / len(batch) for name, pid in workers.pids().items()}
    finally:
        for spy in spies:
            spy.send_signal(2)  # SIGINT: py-spy writes what it sampled and exits
        for spy in spies:
            spy.wait(timeout=60)
        workers.stop()
        server.stop()
    print(f"{args.mix} mix: {len(batch):,} events over {args.sessions} sessions, {SHARDS} shards, {rate:,.0f} ev/s")
    print(f"(sampled for {seconds:.1f} s of saturation plus about 1 s idle before it; idle samples are not kept)")
    for name in workers.pids():
        print("\n".join(report(name, read_samples(root / f"{name}.txt"), cpu[name], args.top, args.own)))
    shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
