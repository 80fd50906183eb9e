"""``agentbus fake-model`` as a real process: prints its URL on stderr, answers the SDK over HTTP with
its fallback script, and stops cleanly (exit 0) on SIGTERM or SIGINT, even with a request hanging."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import anthropic
import pytest

from agentbus_redis.local.supervisor import LISTEN_FD_ENV, bind_listener
from agentbus_redis.workers.model.fake_server import FakeModelAdmin
from agentbus_redis.workers.model.fake_steps import HangStep

REPO_ROOT = Path(__file__).resolve().parents[3]


@pytest.fixture
def fake_model_process() -> Iterator[tuple[subprocess.Popen[str], str]]:
    """``agentbus fake-model --port 0 --script demo`` and the URL it printed."""
    command = [sys.executable, "-m", "agentbus_redis.cli.main", "fake-model", "--port", "0", "--script", "demo"]
    process = subprocess.Popen(command, cwd=REPO_ROOT, stderr=subprocess.PIPE, text=True)
    try:
        assert process.stderr is not None
        url = process.stderr.readline().strip()
        assert url.startswith("http://127.0.0.1:"), url
        yield process, url
    finally:
        if process.poll() is None:
            process.kill()
        process.wait(timeout=30)
        if process.stderr is not None:
            process.stderr.close()


@pytest.mark.parametrize("stop_signal", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_cli_fake_model_serves_the_demo_and_stops_on_signal(
    fake_model_process: tuple[subprocess.Popen[str], str], stop_signal: signal.Signals
) -> None:
    process, url = fake_model_process
    admin = FakeModelAdmin(url)
    prompt: list[anthropic.types.MessageParam] = [{"role": "user", "content": "Take a tour."}]
    with (
        anthropic.Anthropic(base_url=url, api_key="test", max_retries=0) as client,
        ThreadPoolExecutor(1) as pool,
    ):
        message = client.messages.create(model="claude-test-model", max_tokens=100, messages=prompt)
        assert [b.name for b in message.content if b.type == "tool_use"] == ["Glob", "Read", "Read", "Bash"]
        admin.script(None, [HangStep(seconds=600)])
        hanging = pool.submit(client.messages.create, model="claude-test-model", max_tokens=100, messages=prompt)
        while len(admin.requests()) < 2:
            time.sleep(0.01)
        process.send_signal(stop_signal)
        assert process.wait(timeout=30) == 0
        with pytest.raises(anthropic.APIConnectionError):
            hanging.result(timeout=30)
    assert process.stderr is not None
    assert "Traceback" not in process.stderr.read()


def test_cli_fake_model_refuses_a_port_in_use(fake_model_process: tuple[subprocess.Popen[str], str]) -> None:
    _, url = fake_model_process
    port = url.rsplit(":", 1)[1]
    command = [sys.executable, "-m", "agentbus_redis.cli.main", "fake-model", "--port", port]
    done = subprocess.run(command, cwd=REPO_ROOT, capture_output=True, text=True, timeout=60)
    assert done.returncode == 1
    assert done.stderr.startswith(f"agentbus: cannot listen on 127.0.0.1:{port}: ")


def test_cli_fake_model_serves_the_socket_up_hands_down_and_answers_readyz() -> None:
    listener = bind_listener("127.0.0.1", 0)
    port = listener.getsockname()[1]
    command = [
        sys.executable,
        "-m",
        "agentbus_redis.cli.main",
        "fake-model",
        "--port",
        "1",
    ]  # the handed-down socket wins
    env = {**os.environ, LISTEN_FD_ENV: str(listener.fileno())}
    with (
        listener,
        subprocess.Popen(
            command,
            cwd=REPO_ROOT,
            env=env,
            pass_fds=(listener.fileno(),),
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        ) as process,
    ):
        try:
            assert process.stdout is not None
            # Supervised, it logs JSON lines like every worker (they go to up's log): the URL is one of them.
            lines = (json.loads(line) for line in process.stdout)
            announced = next(line for line in lines if line["event"] == "fake_model_listening")
            assert announced["url"] == f"http://127.0.0.1:{port}"
            assert announced["worker"] == "fake-model"
            opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
            with opener.open(f"http://127.0.0.1:{port}/readyz", timeout=30) as response:
                assert response.status == 200
        finally:
            process.terminate()
        assert process.wait(timeout=30) == 0
