"""The soak on demand (issue 25), as a test: ``uv run pytest -m soak tests/integration/test_soak.py``.

Marked ``soak`` and deselected by default (``addopts = -m "not soak"``): it runs for minutes and must never
slow the normal suite. It runs bench/soak.py in its own process — two of every worker type, llmock and the
fake model, SIGKILLs, a Redis restart (``AGENTBUS_SOAK_CLUSTER=1``: a cluster failover) — and passes when
the soak's table is all zeros (0 lost, duplicated, hung, invalid, side effects twice, usage mismatches,
ConnectionErrors to the caller, requests without tools). ``AGENTBUS_SOAK_MINUTES`` sets the length (2).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

MINUTES = float(os.environ.get("AGENTBUS_SOAK_MINUTES", "2"))
HANG_BOUND_S = 90
REPO = Path(__file__).resolve().parents[2]

pytestmark = [pytest.mark.soak, pytest.mark.timeout(int(MINUTES * 60 + HANG_BOUND_S + 900))]


def test_soak_every_turn_ends_and_nothing_is_lost_duplicated_invalid_or_miscounted(tmp_path: Path) -> None:
    args = [sys.executable, str(REPO / "bench" / "soak.py"), "--minutes", str(MINUTES), "--root", str(tmp_path)]
    args += ["--hang-bound-s", str(HANG_BOUND_S)]
    if os.environ.get("AGENTBUS_SOAK_CLUSTER") == "1":
        args.append("--cluster")
    run = subprocess.run(args, cwd=REPO, capture_output=True, text=True, check=False)
    assert run.returncode == 0, f"soak failed (working dir {tmp_path}):\n{run.stdout}\n{run.stderr[-4000:]}"
