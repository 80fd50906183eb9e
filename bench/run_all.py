"""Run every ratio benchmark of issue 31 and add a row to ``bench/RESULTS.md`` (minutes, not hours).

    uv run python bench/run_all.py                 # ~5-10 minutes on a 2-core machine
    uv run python bench/run_all.py --quick         # fewer calls/rounds: a smoke run, its row marked "quick"
    uv run python bench/run_all.py --dry-run       # print the row, leave RESULTS.md alone

Each figure is a ratio (or a difference) against its baseline measured in the same run, so rows taken on
machines of different speed compare; a row also records the load average, which tells a quiet run from a
busy one (a shared machine's absolute numbers are noise, its ratios much less so). The benches:

- ``bench/model_worker.py --calls 40``: time to first token through the bus vs the SDK alone (added p50);
- ``bench/pipeline.py --rounds 3`` (turns mix): throughput vs the raw 3-hop chain, latency at 1k ev/s against
  the raw chain's, and each worker's CPU per event at saturation;
- ``bench/pipeline.py --rounds 3 --mix prompts``: the prompt-heavy throughput ratio;
- ``bench/typed_floor.py --mix turns|prompts``: the typed floor, what any pipeline keeping the bus's contracts
  must do (validate and dump every record as its pydantic model, fsync the transcripts), against the same raw
  chain: where a goal lies below it, the floor is the reason it cannot be met;
- ``bench/tool_round.py``: the time a tool round adds over calling the tool directly, idle and with
  ``--sessions`` concurrent sessions.
"""

from __future__ import annotations

import argparse
import atexit
import datetime
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

BENCH = Path(__file__).resolve().parent
RESULTS = BENCH / "RESULTS.md"
COLUMNS = [
    "date (UTC)",
    "commit",
    "load",
    "TTFT added p50 (bus / SDK)",
    "pipeline vs raw",
    "p99 at 1k ev/s vs raw (within 10 ms)",
    "prompts vs raw",
    "CPU µs/event ingestion / normalization / transcripts (one raw hop)",
    "tool round added p50 / p99, idle",
    "tool round p50 / p99 at N sessions",
    "command",
]
HEADER = (
    """# Benchmark results

One row per run of `uv run python bench/run_all.py` (newest first), each figure against its baseline measured
in the same run (issue 31). Goals: added TTFT p50 ≤ 2 ms; pipeline ≥ 0.8× raw; p99 at 1k ev/s ≤ 2× raw and
≥ 99% durable within 10 ms; prompts mix ≥ 0.5× raw; CPU per event ≤ 25 µs per worker; a tool round adds
≤ 5 ms p50 over the tool run directly. "load" is the 1-minute load average when the run ended (2 cores:
above ~2 the machine was shared and the latencies are inflated). The p99 cell also gives ingress → canonical
log p99 against the raw chain's (neither writes a file) and this disk's syncfs p50: the floor under "durable"
that the raw chain does not pay. The CPU cell also gives what one hop of the raw chain costs per event in the same
run (decode, stamp, encode, XADD, XACK: the least a consumer does), since the absolute µs move with the machine.
The "floor" figures (rows from 2026-11-28 16:26 on) are `bench/typed_floor.py`'s: the pipeline's topology
doing only what the contracts require (every record validated and dumped as its pydantic model, transcripts
fsync'd), no rules; a goal below its floor cannot be met in this stack.

"""
    + "| "
    + " | ".join(COLUMNS)
    + " |\n"
    + "|---" * len(COLUMNS)
    + "|\n"
)


def run(command: list[str]) -> str:
    print("$", " ".join(command), flush=True)
    done = subprocess.run(command, cwd=BENCH.parent, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        sys.stderr.write(done.stdout[-3000:] + done.stderr[-3000:])
        msg = f"{command[1]} failed with exit code {done.returncode}"
        raise RuntimeError(msg)
    return done.stdout


def pipeline_figures(output: str) -> dict[str, Any]:
    """The JSON ``bench/pipeline.py`` prints first."""
    start = output.index("{")
    end = output.index("\n}\n", start) + 2
    figures: dict[str, Any] = json.loads(output[start:end])
    return figures


def git_commit() -> str:
    described = subprocess.run(
        ["git", "describe", "--always", "--dirty"], cwd=BENCH.parent, capture_output=True, text=True, check=False
    )
    return described.stdout.strip() or "unknown"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="fewer calls and rounds (a smoke run)")
    parser.add_argument("--sessions", type=int, default=500, help="concurrent sessions of the loaded tool rounds")
    parser.add_argument("--dry-run", action="store_true", help="print the row, do not touch RESULTS.md")
    args = parser.parse_args()
    python = sys.executable
    scratch = Path(tempfile.mkdtemp(prefix="agentbus-run-all-"))
    atexit.register(shutil.rmtree, scratch, ignore_errors=True)
    calls, rounds, tool_rounds = ("15", "1", "20") if args.quick else ("40", "3", "60")
    model_json, tools_json = scratch / "model.json", scratch / "tools.json"
    floor_json = {mix: scratch / f"floor-{mix}.json" for mix in ("turns", "prompts")}
    run([python, "bench/model_worker.py", "--calls", calls, "--json", str(model_json)])
    turns = pipeline_figures(run([python, "bench/pipeline.py", "--rounds", rounds]))
    prompts = pipeline_figures(run([python, "bench/pipeline.py", "--rounds", rounds, "--mix", "prompts"]))
    for mix, path in floor_json.items():
        run([python, "bench/typed_floor.py", "--mix", mix, "--rounds", rounds, "--json", str(path)])
    floors = {mix: json.loads(path.read_text()) for mix, path in floor_json.items()}
    sessions = str(args.sessions)
    run([python, "bench/tool_round.py", "--rounds", tool_rounds, "--sessions", sessions, "--json", str(tools_json)])
    model = json.loads(model_json.read_text())
    tools = json.loads(tools_json.read_text())
    latency = turns["paced_latency"]
    cpu = turns["cpu_us_per_event"]
    loaded = tools["loaded"].get(sessions, {})
    p99_ratio = latency.get("p99_ms", float("nan")) / turns["raw_paced_p99_ms"]
    log_ratio = turns["paced_log_written"].get("p99_ms", float("nan")) / turns["raw_paced_p99_ms"]
    row = [
        datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M"),
        f"`{git_commit()}`" + (" (quick)" if args.quick else ""),
        f"{os.getloadavg()[0]:.1f}",
        f"{model['added_p50_ms']:+.1f} ms ({model['bus_p50_ms']:.1f} / {model['sdk_p50_ms']:.1f} ms)",
        f"{turns['throughput_ratio']:.2f}× (floor {floors['turns']['floor_vs_raw']:.2f}×)",
        f"{p99_ratio:.1f}× ({latency.get('p99_ms', float('nan')):.1f} vs {turns['raw_paced_p99_ms']:.1f} ms; "
        f"{latency.get('within_goal', float('nan')):.1%}; canonical log {log_ratio:.1f}×, "
        f"syncfs p50 {turns['sync_p50_ms']:.1f} ms)",
        f"{prompts['throughput_ratio']:.2f}× (floor {floors['prompts']['floor_vs_raw']:.2f}×)",
        f"{cpu['ingestion']:.0f} / {cpu['normalization']:.0f} / {cpu['transcripts']:.0f} "
        f"({turns.get('raw_hop_cpu_us_per_event', float('nan')):.0f}; floor "
        + " / ".join(f"{value:.0f}" for value in floors["turns"]["cpu_us_per_event"].values())
        + ")",
        f"{tools['idle_added_p50_ms']:+.1f} / {tools['idle_added_p99_ms']:+.1f} ms",
        f"{loaded.get('p50_ms', float('nan')):.0f} / {loaded.get('p99_ms', float('nan')):.0f} ms (N={sessions})",
        "`uv run python bench/run_all.py" + (" --quick" if args.quick else "") + "`",
    ]
    line = "| " + " | ".join(row) + " |\n"
    print(line)
    if args.dry_run:
        return
    existing = RESULTS.read_text() if RESULTS.exists() else HEADER
    head, _, rows = existing.partition("|---|")
    table_rule = "|---|" + rows.split("\n", 1)[0] + "\n"
    older = rows.split("\n", 1)[1] if "\n" in rows else ""
    RESULTS.write_text(head + table_rule + line + older)
    print(f"added to {RESULTS}")


if __name__ == "__main__":
    main()
