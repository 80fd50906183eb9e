"""The docs site builds with ``mkdocs build --strict``: no broken link, no missing page, and the generated
reference pages (CLI, settings, metrics, alerts, SDK) build from the code as it is now."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.docs.examples import ROOT

pytestmark = pytest.mark.slow


def test_mkdocs_builds_strict(tmp_path: Path) -> None:
    site = tmp_path / "site"
    done = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(site)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
        timeout=600,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-4000:]
    cli = (site / "reference/cli/index.html").read_text(encoding="utf-8")
    assert "agentbus transcript verify" in cli  # each sub-app's commands, with their own help
    settings = (site / "reference/settings/index.html").read_text(encoding="utf-8")
    assert "AGENTBUS_TOOLS__ASK_POLICY" in settings
    assert "REDIS_URL" in settings
    metrics = (site / "reference/metrics/index.html").read_text(encoding="utf-8")
    from agentbus_redis.observability.metrics import metric_families

    assert [family.name for family in metric_families() if family.name not in metrics] == []
    alerts = (site / "reference/alerts/index.html").read_text(encoding="utf-8")
    assert "AgentbusWorkerDown" in alerts
    sdk = (site / "reference/sdk/index.html").read_text(encoding="utf-8")
    assert "converse" in sdk
