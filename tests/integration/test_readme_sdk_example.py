"""Issue 16, "the SDK example runs": the README's Python SDK block, run as the script it is against a real
bus (private Redis, ingestion and normalization worker processes), twice on the same session — the second
run must get the request its own prompt led to, never the first run's (what ``next_request`` means)."""

from __future__ import annotations

import asyncio
import subprocess
import sys
from pathlib import Path

import pytest

from tests.integration.cluster import WorkerCluster

pytestmark = pytest.mark.integration

README = Path(__file__).resolve().parents[2] / "README.md"


def sdk_example() -> str:
    """The first ```python block of the README's "Python SDK" section."""
    section = README.read_text(encoding="utf-8").split("## Python SDK", 1)[1]
    return section.split("```python", 1)[1].split("```", 1)[0]


def run_example(script: Path, cluster: WorkerCluster) -> list[str]:
    done = subprocess.run(
        [sys.executable, str(script)], env=cluster.env(), capture_output=True, text=True, timeout=90, check=False
    )
    assert done.returncode == 0, done.stderr
    return done.stdout.splitlines()


def test_readme_sdk_example_runs_as_a_script_and_next_means_next(cluster: WorkerCluster, tmp_path: Path) -> None:
    cluster.start("ingestion")
    cluster.start("normalization")
    cluster.wait_ready()
    script = tmp_path / "sdk_example.py"
    script.write_text(sdk_example(), encoding="utf-8")

    first = run_example(script, cluster)
    first_seq = int(first[0].split()[0])
    assert "'hello'" in first[0]
    assert first[1:] == [f"{first_seq} user"]  # follow() printed the session's events, then the loop broke

    second = run_example(script, cluster)  # the same session "s1", reused
    second_seq = int(second[0].split()[0])
    assert second_seq > first_seq  # the request of this run's prompt, not the previous one
    assert [line.split()[0] for line in second[1:]] == [str(seq) for seq in range(1, second_seq + 1)]

    async def next_without_a_new_prompt() -> None:
        async with cluster.client() as bus:
            assert (await bus.latest_request("s1")) is not None
            await bus.next_request("s1", timeout_s=0.5)  # the session's existing request is not "next"

    with pytest.raises(TimeoutError, match="no request for session s1"):
        asyncio.run(next_without_a_new_prompt())
