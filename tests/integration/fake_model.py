"""The fake Anthropic-compatible server as the model workers of a test meet it: its own process
(``agentbus fake-model --port 0``), real HTTP on loopback, scripted per session (CONTRACTS.md)."""

from __future__ import annotations

import os
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from agentbus_redis.json_types import JsonObject
from agentbus_redis.workers.model.fake_server import FakeModelAdmin
from tests.integration.forked import ForkedProcess, start_command


@dataclass
class FakeModelProcess:
    process: ForkedProcess
    base_url: str

    @property
    def admin(self) -> FakeModelAdmin:
        return FakeModelAdmin(self.base_url)

    def script(self, session_id: str | None, steps: list[JsonObject]) -> None:
        self.admin.script(session_id, steps)

    def requests(self, session_id: str) -> list[dict[str, Any]]:
        return [record.model_dump(mode="json") for record in self.admin.requests(session_id)]

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()


def start_fake_model(log_path: Path, *, script: str = "echo", timeout_s: float = 30.0) -> FakeModelProcess:
    """Start ``agentbus fake-model`` (its output to ``log_path``) and wait for the URL it prints."""
    process = start_command(["fake-model", "--port", "0", "--script", script], env=os.environ, log_path=log_path)
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        text = log_path.read_text(errors="replace")
        if "http://" in text:
            url = text[text.index("http://") :].split()[0].rstrip("/")
            return FakeModelProcess(process, url)
        if process.poll() is not None:
            break
        time.sleep(0.05)
    process.kill()
    msg = f"fake-model did not print its URL: {log_path.read_text(errors='replace')}"
    raise RuntimeError(msg)
