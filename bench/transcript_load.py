"""Benchmark: load + resume + normalize a large real transcript vs a plain-JSON baseline.

agentbus path (what ``agentbus normalize FILE --prompt continue`` does after reading the file):
``read_transcript`` (every line parsed into the typed line model) → ``build_transcript`` + leaf + chain
walk + R7.18 recovery + R7.20 deserialization (``resume_session``) → ``to_api_request`` (the whole §4
pipeline) → the request body.

Baseline: ``orjson.loads`` (and, separately, stdlib ``json.loads``) of every line, a uuid → dict map, the
latest leaf by timestamp, a parentUuid walk to the root, and ``{role, content}`` for the user/assistant
lines on it: the least a tool can do to get "the conversation" out of the file, without any of
Claude Code's rules.

Wall time is the median of ``--runs`` runs (file bytes already in memory, GC collected before each run);
CPU time is the least process CPU time of those runs (steadier than wall time on a machine shared with
other work); peak memory is tracemalloc's peak during one extra run of each (tracemalloc slows code
down, so it is never on during timed runs).

A pi session file (detected from its header, P7.3) is measured on pi's path instead: parse (+ the
1→3 migration), context from the tree + ``convertToLlm`` (P8, P4), then ours (mapping to Claude Code
messages + ``to_api_request``) and pi's own request, against a plain ``json.loads`` of every line.

Usage: ``uv run python bench/transcript_load.py [FILE] [--runs N]``
(default FILE: the 2.7 MB marot__spotter session of the reference corpus; ``--pi`` takes the 2.4 MB
``before-compaction.jsonl`` pi session).
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import statistics
import sys
import time
import tracemalloc
from collections.abc import Callable
from pathlib import Path
from typing import Any, NamedTuple

import orjson

from agentbus_redis.clock import FixedClock
from agentbus_redis.ids import SequentialIds
from agentbus_redis.normalize import to_api_request
from agentbus_redis.pi.request import claude_code_messages, llm_view, pi_own_request
from agentbus_redis.pi.session import looks_like_pi_session, read_pi_session
from agentbus_redis.transcript import build_transcript, read_transcript
from agentbus_redis.transcript_files.api_view import api_view_of_transcript

REPO_ROOT = Path(__file__).resolve().parent.parent
CORPUS = Path(os.environ.get("AGENTBUS_CORPUS", REPO_ROOT.parent / "shared" / "corpus"))
DEFAULT_FILE = CORPUS / "claude-code" / "marot__spotter" / "258c7280-ae70-4798-800f-63464d01a85d.jsonl"
DEFAULT_PI_FILE = CORPUS / "pi" / "badlogic__pi-mono" / "before-compaction.jsonl"


def baseline(data: bytes, loads: Callable[[bytes], Any]) -> list[dict[str, Any]]:
    """Plain JSON: parse every line, walk the latest leaf's parent chain, keep role + content."""
    by_uuid: dict[str, dict[str, Any]] = {}
    has_child: set[str] = set()
    for raw in data.split(b"\n"):
        if not raw.strip():
            continue
        try:
            line = loads(raw)
        except ValueError:
            continue
        if isinstance(line, dict) and isinstance(line.get("uuid"), str):
            by_uuid[line["uuid"]] = line
            parent = line.get("parentUuid")
            if isinstance(parent, str):
                has_child.add(parent)
    leaves = [
        line
        for uuid, line in by_uuid.items()
        if uuid not in has_child and line.get("type") in {"user", "assistant"} and not line.get("isSidechain")
    ]
    leaf = max(leaves, key=lambda line: str(line.get("timestamp", "")), default=None)
    chain: list[dict[str, Any]] = []
    seen: set[str] = set()
    current = leaf
    while current is not None and current["uuid"] not in seen:
        seen.add(current["uuid"])
        chain.append(current)
        parent = current.get("parentUuid")
        current = by_uuid.get(parent) if isinstance(parent, str) else None
    chain.reverse()
    return [
        {"role": line["message"]["role"], "content": line["message"]["content"]}
        for line in chain
        if line.get("type") in {"user", "assistant"} and isinstance(line.get("message"), dict)
    ]


def agentbus_parse(data: bytes) -> object:
    """Stage 1 only: every line into the typed line model."""
    return build_transcript(read_transcript(data))


def agentbus_normalize(data: bytes) -> object:
    """The full path of ``agentbus normalize FILE --prompt continue``."""
    return api_view_of_transcript(data, prompt="continue", clock=FixedClock(), ids=SequentialIds()).request


def json_lines(data: bytes) -> object:
    """The pi baseline: a plain ``json.loads`` of every line."""
    return [json.loads(raw) for raw in data.split(b"\n") if raw.strip()]


def pi_parse(data: bytes) -> object:
    return read_pi_session(data, ids=SequentialIds())


def pi_context(data: bytes) -> object:
    return llm_view(pi_parse(data))  # type: ignore[arg-type]


def pi_ours(data: bytes) -> object:
    session = read_pi_session(data, ids=SequentialIds())
    messages = claude_code_messages(llm_view(session), session_id=session.session_id, cwd=session.header.cwd)
    return to_api_request(messages, prompt="continue", clock=FixedClock(), ids=SequentialIds()).request


def pi_own(data: bytes) -> object:
    return pi_own_request(llm_view(read_pi_session(data, ids=SequentialIds())))


class Measurement(NamedTuple):
    wall: float
    """Median wall seconds."""
    cpu: float
    """Least CPU seconds of this process: what other load on a shared machine disturbs least."""
    peak: float
    """Peak traced MiB."""


def measure(function: Callable[[bytes], object], data: bytes, runs: int) -> Measurement:
    walls: list[float] = []
    cpus: list[float] = []
    for _ in range(runs):
        gc.collect()
        started, started_cpu = time.perf_counter(), time.process_time()
        function(data)
        cpus.append(time.process_time() - started_cpu)
        walls.append(time.perf_counter() - started)
    gc.collect()
    tracemalloc.start()
    function(data)
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    return Measurement(statistics.median(walls), min(cpus), peak / (1024 * 1024))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("file", nargs="?", type=Path, default=DEFAULT_FILE)
    parser.add_argument("--runs", type=int, default=7)
    parser.add_argument("--pi", action="store_true", help="measure the default pi session")
    args = parser.parse_args()
    data = (DEFAULT_PI_FILE if args.pi and args.file == DEFAULT_FILE else args.file).read_bytes()
    if looks_like_pi_session(data):
        report_pi(data, args.runs)
        return
    request = api_view_of_transcript(data, prompt="continue", clock=FixedClock(), ids=SequentialIds()).request
    plain = baseline(data, orjson.loads)
    line_count = data.count(b"\n")
    print(f"file: {args.file} ({len(data) / 1e6:.2f} MB, {line_count} lines), runs: {args.runs}")
    print(f"request: {len(request['messages'])} messages; baseline chain: {len(plain)} user/assistant lines")
    print(f"python {sys.version.split()[0]}")
    cases: list[tuple[str, Callable[[bytes], object]]] = [
        ("baseline orjson (parse + chain walk)", lambda blob: baseline(blob, orjson.loads)),
        ("baseline json   (parse + chain walk)", lambda blob: baseline(blob, json.loads)),
        ("agentbus parse (read_transcript + build_transcript)", agentbus_parse),
        ("agentbus normalize (parse + resume + to_api_request)", agentbus_normalize),
    ]
    results = {name: measure(function, data, args.runs) for name, function in cases}
    width = max(len(name) for name in results)
    print(f"{'case':<{width}}  {'wall ms (median)':>16}  {'cpu ms (min)':>12}  {'peak MiB':>9}")
    for name, result in results.items():
        print(f"{name:<{width}}  {result.wall * 1000:>16.1f}  {result.cpu * 1000:>12.1f}  {result.peak:>9.1f}")
    full = results[cases[3][0]]
    for label, base in (("orjson", results[cases[0][0]]), ("json", results[cases[1][0]])):
        print(
            f"ratio normalize / {label} baseline: wall {full.wall / base.wall:.1f}x, "
            f"cpu {full.cpu / base.cpu:.1f}x, peak memory {full.peak / base.peak:.1f}x"
        )


def report(cases: list[tuple[str, Callable[[bytes], object]]], data: bytes, runs: int) -> dict[str, Measurement]:
    results = {name: measure(function, data, runs) for name, function in cases}
    width = max(len(name) for name in results)
    print(f"{'case':<{width}}  {'wall ms (median)':>16}  {'cpu ms (min)':>12}  {'peak MiB':>9}")
    for name, result in results.items():
        print(f"{name:<{width}}  {result.wall * 1000:>16.1f}  {result.cpu * 1000:>12.1f}  {result.peak:>9.1f}")
    return results


def report_pi(data: bytes, runs: int) -> None:
    lines = data.count(b"\n")
    print(f"pi session: {len(data) / 1e6:.2f} MB, {lines} lines, runs: {runs}, python {sys.version.split()[0]}")
    cases: list[tuple[str, Callable[[bytes], object]]] = [
        ("baseline json.loads of every line", json_lines),
        ("pi parse (+ migration to v3)", pi_parse),
        ("pi parse + context + convertToLlm", pi_context),
        ("ours: parse + context + normalize (to_api_request)", pi_ours),
        ("pi's own request (transformMessages + convertMessages)", pi_own),
    ]
    results = report(cases, data, runs)
    base = results[cases[0][0]]
    for name, _ in cases[1:]:
        result = results[name]
        print(f"ratio {name} / json.loads: wall {result.wall / base.wall:.1f}x, cpu {result.cpu / base.cpu:.1f}x")


if __name__ == "__main__":
    main()
