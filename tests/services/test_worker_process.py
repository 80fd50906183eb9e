"""What a worker process sets up for itself before serving (``workers/registry.py``)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]


def test_a_worker_freezes_its_startup_heap_and_collects_young_objects_less_often() -> None:
    """Startup objects leave the collector's reach and the youngest generation is collected every
    ``GC_THRESHOLDS[0]`` allocations (in a child process: the test run's own collector stays as it is)."""
    probe = (
        "import gc; from agentbus_redis.workers.registry import GC_THRESHOLDS, freeze_startup_heap; "
        "freeze_startup_heap(); "
        "assert gc.get_threshold() == GC_THRESHOLDS, gc.get_threshold(); "
        "assert gc.get_freeze_count() > 10_000, gc.get_freeze_count()"
    )
    subprocess.run([sys.executable, "-c", probe], cwd=REPO_ROOT, check=True, timeout=60)
