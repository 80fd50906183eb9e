r"""Instructions per unit of work of a benchmark, counted by valgrind: a CPU figure that does not move with the machine.

    uv run python bench/instructions.py --sizes 1100 4400 -- \
        bench/ingestion_replay.py --rounds 1 --sessions 50 --events {}
    uv run python bench/instructions.py --sizes 1100 4400 --tree /work/wt/before -- bench/ingestion_replay.py ...

On a shared 2-core machine the CPU time of the same code moves by ±30% from one minute to the next (issue 31), so
a change of 10% to a hot path cannot be read from seconds. ``valgrind --tool=callgrind`` counts the instructions
the process executes, which is the same for the same code and input whatever else the machine does. The command
(its ``{}`` replaced by each size) runs once per size; the difference of the two counts divided by the difference
of the sizes is the cost of one unit, with the process's start-up (imports, pydantic schemas) cancelled out.
``PYTHONHASHSEED`` is fixed, so set and dict orders repeat. Start-up still varies by a few tens of millions of
instructions between runs: make the sizes differ by thousands of units (for ingestion_replay, 1,100 and 4,400
events; with 1,100 and 2,200 one run in four was 6% off). What it does not count: time in the kernel (system
calls, the network) and waiting on memory; it prices the Python code, which is what a change to it moves.
Under valgrind a program runs about 50 times slower: a size of a few thousand events takes a minute or two.
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import tempfile
from pathlib import Path

COLLECTED = re.compile(r"Collected : (\d+)")


def instructions(command: list[str], cwd: Path) -> int:
    """The instructions ``command`` executed (all its threads), as callgrind counts them."""
    with tempfile.TemporaryDirectory(prefix="agentbus-instructions-") as scratch:
        log = Path(scratch) / "callgrind.log"
        valgrind = [
            "valgrind",
            "--tool=callgrind",
            f"--callgrind-out-file={scratch}/callgrind.out",
            f"--log-file={log}",
        ]
        environment = {**os.environ, "PYTHONHASHSEED": "0"}
        subprocess.run([*valgrind, *command], cwd=cwd, env=environment, check=True, stdout=subprocess.DEVNULL)
        found = COLLECTED.search(log.read_text())
    if found is None:
        msg = f"callgrind reported no count for {command}"
        raise RuntimeError(msg)
    return int(found.group(1))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", type=int, nargs=2, metavar=("SMALL", "LARGE"), required=True)
    parser.add_argument("--tree", type=Path, default=Path.cwd(), help="the checkout to run in (its own .venv)")
    parser.add_argument("command", nargs=argparse.REMAINDER, help="-- script.py args, with {} for the size")
    args = parser.parse_args()
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not any("{}" in part for part in command):
        parser.error("the command needs a {} where the size goes")
    python = str(args.tree / ".venv" / "bin" / "python")
    small, large = args.sizes
    counts = [
        instructions([python, *(part.replace("{}", str(size)) for part in command)], args.tree)
        for size in (small, large)
    ]
    per_unit = (counts[1] - counts[0]) / (large - small)
    print(f"{args.tree}: {per_unit:,.0f} instructions a unit ({small}: {counts[0]:,}; {large}: {counts[1]:,})")


if __name__ == "__main__":
    main()
