"""How long an ``agentbus`` command takes from exec to exit (issue 27, "Fast commands"), best of N.

    uv run python bench/cli_startup.py                          # this checkout, against ``python -c pass``
    uv run python bench/cli_startup.py --before /tmp/cli-before  # and an older checkout, in the same run

``--before`` is a checkout with its own ``.venv`` (``git worktree add /tmp/cli-before ae14cc5 && cd
/tmp/cli-before && uv sync``); its CLI is ``python -m services.cli.main`` before the one-namespace restructure,
``python -m agentbus_redis.cli.main`` after it. The machine may be busy: every command runs ``--runs`` times
(interleaved, so a burst of load hits every command alike) and the best run counts; ``python -c pass`` is
measured in the same loop as the floor. A private ``redis-server`` is started on a free port and seeded with
one session that has an event (a prompt) and priced usage, so ``tail`` and ``usage`` print real rows.

Run on the shared 2-core machine (load average 5-26 during the run, so +-30 % between runs), best of 5,
seconds; "before" is ae14cc5, "after" the wt/cli-speed branch (issue 27):

    bytecode cached (an installed CLI from its second run on); python -c pass = 0.014 s
    command                                     before   after   after/before   modules imported
    agentbus --help                              0.116   0.120   1.03x          147 -> 147
    agentbus normalize small.jsonl (16 lines)    0.625   0.399   0.64x (noise)  330 -> 335
    agentbus tools ls                            0.676   0.372   0.55x          680 -> 499
    agentbus tail SESSION                        0.701   0.570   0.81x          679 -> 519
    agentbus usage SESSION                       1.050   0.468   0.45x          680 -> 504
    agentbus send SESSION TEXT                   0.681   0.594   0.87x          679 -> 519

    from source (PYTHONDONTWRITEBYTECODE=1, no __pycache__: this sandbox); python -c pass = 0.018 s
    agentbus --help                              0.390   0.373
    agentbus normalize small.jsonl (16 lines)    1.008   1.373   (noise: the command's imports are unchanged)
    agentbus tools ls                            2.187   1.691
    agentbus tail SESSION                        2.143   1.783
    agentbus usage SESSION                       3.839   2.844
    agentbus send SESSION TEXT                   4.000   2.759

Most of the 1.3 s of the issue is compiling ~500 modules from source on every run: this environment sets
PYTHONDONTWRITEBYTECODE=1 and the venvs hold no ``__pycache__``. With bytecode cached, what remains is redis-py
(its ``commands.core``, the cluster clients, and ``opentelemetry.sdk.metrics`` when OpenTelemetry is installed),
pydantic-settings and the bus' own pydantic models (``tail`` and ``send`` build the event union).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parents[1]
SESSION = "bench-cli"


def transcript_lines(count: int) -> list[str]:
    """A Claude Code transcript of ``count`` lines: alternating user prompts and assistant replies."""
    import json

    lines = []
    parent = None
    for index in range(count):
        uuid = f"00000000-0000-4000-8000-{index:012d}"
        base = {
            "parentUuid": parent,
            "isSidechain": False,
            "userType": "external",
            "cwd": "/tmp/bench",
            "sessionId": "11111111-1111-4111-8111-111111111111",
            "version": "2.1.38",
            "uuid": uuid,
            "timestamp": f"2026-01-01T00:00:{index:02d}.000Z",
        }
        if index % 2 == 0:
            line: dict[str, Any] = {**base, "type": "user", "message": {"role": "user", "content": f"question {index}"}}
        else:
            line = {
                **base,
                "type": "assistant",
                "requestId": f"req_{index}",
                "message": {
                    "id": f"msg_{index}",
                    "type": "message",
                    "role": "assistant",
                    "model": "claude-sonnet-4-5-20250929",
                    "content": [{"type": "text", "text": f"answer {index}"}],
                    "stop_reason": "end_turn",
                    "stop_sequence": None,
                    "usage": {"input_tokens": 10, "output_tokens": 5},
                },
            }
        lines.append(json.dumps(line))
        parent = uuid
    return lines


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def start_redis(workdir: Path) -> tuple[subprocess.Popen[bytes], str]:
    port = free_port()
    server = subprocess.Popen(
        ["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"],
        cwd=workdir,
        stdout=subprocess.DEVNULL,
    )
    url = f"redis://127.0.0.1:{port}/0"
    for _ in range(200):
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5) as conn:
                conn.sendall(b"PING\r\n")
                if conn.recv(16).startswith(b"+PONG"):
                    return server, url
        except OSError:
            time.sleep(0.05)
    server.kill()
    raise SystemExit("redis-server did not answer PING")


def seed(url: str, workdir: Path, env: dict[str, str]) -> None:
    """One session with a prompt in its event log (through a real ingestion worker) and priced usage."""
    import redis.asyncio as aioredis

    from agentbus_redis.config.settings import Settings
    from agentbus_redis.model.cost import DEFAULT_PRICES
    from agentbus_redis.stores.usage import record_priced_usage
    from agentbus_redis.streams.topology import Topology

    worker_env = {**env, "AGENTBUS_INTERNAL_KEY": "bench-key", "LOG_LEVEL": "WARNING"}
    worker = subprocess.Popen(
        [sys.executable, "-m", "agentbus_redis.cli.main", "worker", "ingestion", "--port", "0"],
        cwd=workdir,
        env=worker_env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        agentbus = [sys.executable, "-m", "agentbus_redis.cli.main"]
        subprocess.run([*agentbus, "send", SESSION, "hello"], cwd=workdir, env=env, check=True, capture_output=True)
        for _ in range(600):
            tail = subprocess.run([*agentbus, "tail", SESSION], cwd=workdir, env=env, capture_output=True, text=True)
            if tail.returncode == 0 and "hello" in tail.stdout:
                break
            time.sleep(0.1)
        else:
            raise SystemExit("the ingestion worker never logged the prompt")
    finally:
        worker.terminate()
        worker.wait(timeout=60)

    async def usage() -> None:
        topology = Topology(Settings(_env_file=None, redis_url=url).names)
        redis = aioredis.Redis.from_url(url)
        try:
            await record_priced_usage(
                redis,
                topology,
                SESSION,
                model="claude-sonnet-4-5-20250929",
                usage={"input_tokens": 1000, "output_tokens": 500},
                prices=DEFAULT_PRICES,
                request_id="req_bench",
            )
        finally:
            await redis.aclose()

    asyncio.run(usage())


def run_once(argv: list[str], *, cwd: Path, env: dict[str, str]) -> float:
    started = time.perf_counter()
    done = subprocess.run(argv, cwd=cwd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, check=False)
    elapsed = time.perf_counter() - started
    if done.returncode != 0:
        raise SystemExit(f"{' '.join(argv)} exited {done.returncode}: {done.stderr.decode()[-500:]}")
    return elapsed


def bytecode_envs(env: dict[str, str], workdir: Path) -> dict[str, dict[str, str]]:
    """Two ways Python finds a module: from bytecode cached by an earlier run (what an installed CLI does
    from its second run on), and compiled from source every time (``PYTHONDONTWRITEBYTECODE=1`` with no
    ``__pycache__``, as in this project's sandboxes and CI containers). Each uses a private
    ``PYTHONPYCACHEPREFIX``, so neither reads nor writes the checkouts' own ``__pycache__``."""
    cached = {name: value for name, value in env.items() if name != "PYTHONDONTWRITEBYTECODE"}
    cached["PYTHONPYCACHEPREFIX"] = str(workdir / "pycache")
    from_source = {**env, "PYTHONDONTWRITEBYTECODE": "1", "PYTHONPYCACHEPREFIX": str(workdir / "no-pycache")}
    return {"cached bytecode": cached, "from source": from_source}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--before", type=Path, help="an older checkout with its own .venv, measured in the same run")
    parser.add_argument("--runs", type=int, default=5)
    args = parser.parse_args()

    workdir = Path(tempfile.mkdtemp(prefix="agentbus-cli-bench-"))
    (workdir / "small.jsonl").write_text("\n".join(transcript_lines(16)) + "\n")
    server, url = start_redis(workdir)
    env = {name: value for name, value in os.environ.items() if not name.startswith("AGENTBUS_")}
    env.update(REDIS_URL=url, PYTHONPATH="")
    commands = {
        "agentbus --help": ["--help"],
        "agentbus normalize small.jsonl (16 lines)": ["normalize", str(workdir / "small.jsonl")],
        "agentbus tools ls": ["tools", "ls"],
        f"agentbus tail {SESSION}": ["tail", SESSION],
        f"agentbus usage {SESSION}": ["usage", SESSION],
        f"agentbus send {SESSION} TEXT": ["send", SESSION, "hi"],
    }
    variants: dict[str, list[str]] = {"after": [sys.executable, "-m", "agentbus_redis.cli.main"]}
    if args.before is not None:
        old_layout = (args.before / "services" / "cli" / "main.py").exists()
        module = "services.cli.main" if old_layout else "agentbus_redis.cli.main"
        variants = {"before": [str(args.before / ".venv" / "bin" / "python"), "-m", module], **variants}
    modes = bytecode_envs(env, workdir)
    best: dict[tuple[str, str, str], float] = {}
    floor: dict[str, float] = {}
    try:
        seed(url, workdir, env)
        for command in commands.values():  # warm-up: fills the bytecode cache of the cached mode
            for prefix in variants.values():
                run_once([*prefix, *command], cwd=workdir, env=modes["cached bytecode"])
        for _ in range(args.runs):  # interleaved: a burst of load hits every command and variant alike
            for mode, mode_env in modes.items():
                floor[mode] = min(
                    floor.get(mode, float("inf")), run_once([sys.executable, "-c", "pass"], cwd=workdir, env=mode_env)
                )
                for label, command in commands.items():
                    for variant, prefix in variants.items():
                        key = (mode, label, variant)
                        elapsed = run_once([*prefix, *command], cwd=workdir, env=mode_env)
                        best[key] = min(best.get(key, float("inf")), elapsed)
    finally:
        server.terminate()
        server.wait(timeout=30)
        shutil.rmtree(workdir, ignore_errors=True)

    for mode in modes:
        print(f"\n{mode}: best of {args.runs}, seconds; python -c pass = {floor[mode]:.3f}s")
        header = f"{'command':<44}" + "".join(f"{variant:>10}" for variant in variants)
        header += f"{'after/pass':>12}" + (f"{'after/before':>14}" if args.before else "")
        print(header)
        for label in commands:
            row = f"{label:<44}" + "".join(f"{best[(mode, label, variant)]:>10.3f}" for variant in variants)
            row += f"{best[(mode, label, 'after')] / floor[mode]:>11.1f}x"
            if args.before is not None:
                row += f"{best[(mode, label, 'after')] / best[(mode, label, 'before')]:>13.2f}x"
            print(row)


if __name__ == "__main__":
    main()
