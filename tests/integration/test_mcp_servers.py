"""Issue 29, MCP servers as tools, against servers no one on the project wrote: the reference
``@modelcontextprotocol/server-everything`` (npm, pinned in tests/compat/npm_clients.py) over stdio and over
streamable HTTP, and ``mcp-server-time`` (PyPI, a dev dependency), all configured in one ``.mcp.json`` of a
real tool worker. The fake model server calls their tools through the real bus; the test reads what the
session's log, the tool catalog and ``agentbus tools ls`` say.

The stdio server-everything runs behind ``tee``, so the test sees every message the worker sent it (the
``notifications/cancelled`` of an interrupted call)."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from agentbus_redis.bus.events import LogEntry
from agentbus_redis.confinement.workspaces import workspace_relative_dir
from agentbus_redis.messages.content import ImageBlock, TextBlock, ToolResultBlock
from agentbus_redis.messages.kinds import ProgressMessage, UserMessage
from agentbus_redis.stores.tool_catalog import read_catalog_snapshot
from agentbus_redis.tools.catalog import McpServerStatus
from tests.cli.process import AGENTBUS, agentbus, cli_env
from tests.compat.npm_clients import MCP_SERVER_EVERYTHING, NpmUnreachable, ensure_installed, install_dir
from tests.integration.cluster import TEST_ALLOW_RULES, WorkerCluster, eventually
from tests.integration.fake_model import FakeModelProcess
from tests.integration.model_turns import ended_with, live_messages, reply, text, tool_use, wait_for

pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.timeout(300)]
"""The module's setup starts five workers and four MCP servers (two of them node): on a loaded machine that
alone was seen to take over 120 s."""

MAX_OUTPUT_CHARS = 20_000
GREETING = "hello-from-the-worker-environment"


@pytest.fixture(scope="module")
def everything_js() -> Path:
    """server-everything's entry point (``node index.js stdio|streamableHttp``), installed pinned."""
    try:
        ensure_installed(MCP_SERVER_EVERYTHING)
    except NpmUnreachable as unreachable:
        pytest.skip(str(unreachable))
    return install_dir(MCP_SERVER_EVERYTHING) / "node_modules" / MCP_SERVER_EVERYTHING.package / "dist" / "index.js"


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


@pytest.fixture(scope="module")
def everything_http(everything_js: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """server-everything serving streamable HTTP on a port of its own: its ``/mcp`` URL."""
    port = _free_port()
    log = (tmp_path_factory.mktemp("everything-http") / "server.log").open("wb")
    server = subprocess.Popen(
        ["node", str(everything_js), "streamableHttp"],
        env={**cli_env(), "PORT": str(port)},
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                if server.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError("server-everything (streamableHttp) did not start") from None
                time.sleep(0.1)
        yield f"http://127.0.0.1:{port}/mcp"
    finally:
        server.send_signal(signal.SIGTERM)
        try:
            server.wait(timeout=10)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait()
        log.close()


@pytest.fixture(scope="module")
def sent_to_everything(module_cluster: WorkerCluster) -> Path:
    """Every line the tool worker wrote to the stdio server-everything."""
    return module_cluster.root / "sent-to-everything.jsonl"


@pytest.fixture(scope="module")
def deployment(
    module_cluster: WorkerCluster,
    fake: FakeModelProcess,
    everything_js: Path,
    everything_http: str,
    sent_to_everything: Path,
) -> WorkerCluster:
    config = {
        "mcpServers": {
            "everything": {
                "command": "sh",
                "args": ["-c", f'tee -a "$SENT" | exec node {everything_js} stdio'],
                "env": {
                    "SENT": str(sent_to_everything),
                    "GREETING": "${MCP_TEST_GREETING}",
                    "FALLBACK": "${MCP_TEST_UNSET:-the-default}",
                },
            },
            "web": {"type": "http", "url": everything_http},
            "time": {
                "command": sys.executable,
                "args": ["-m", "mcp_server_time", "--local-timezone", "UTC"],
                "agentbus": {"required": True},
            },
            "scratch": {"command": "node", "args": [str(everything_js), "stdio"], "agentbus": {"perSession": True}},
        }
    }
    config_path = module_cluster.root / ".mcp.json"
    config_path.write_text(json.dumps(config), encoding="utf-8")
    module_cluster.extra_env.update(
        {
            "ANTHROPIC_API_KEY": "sk-ant-test",
            "AGENTBUS_MODEL__BASE_URL": fake.base_url,
            "AGENTBUS_MODEL__MODEL": "claude-sonnet-4-6",
            "AGENTBUS_TOOLS__MCP_CONFIG": json.dumps([str(config_path)]),
            "AGENTBUS_TOOLS__ALLOW": json.dumps(
                [*TEST_ALLOW_RULES, "mcp__everything", "mcp__web__*", "mcp__time", "mcp__scratch"]
            ),
            "AGENTBUS_TOOLS__DENY": json.dumps(["mcp__time__convert_time"]),
            "AGENTBUS_TOOLS__TIMEOUT_S": "60",
            "AGENTBUS_TOOLS__WORKSPACE_SCOPE": "session",
            "AGENTBUS_TOOLS__MCP_PING_INTERVAL_S": "0.5",
            "AGENTBUS_TOOLS__MCP_BACKOFF_INITIAL_S": "2",
            "AGENTBUS_TOOLS__MCP_BACKOFF_MAX_S": "4",
            "AGENTBUS_TOOLS__MCP_MAX_OUTPUT_CHARS": str(MAX_OUTPUT_CHARS),
            "MCP_TEST_GREETING": GREETING,
        }
    )
    for name in ("ingestion", "normalization", "transcripts", "tools", "model"):
        module_cluster.start(name)
    module_cluster.wait_ready(timeout_s=240)  # the tool worker is ready once the required server is connected
    return module_cluster


async def _servers(deployment: WorkerCluster) -> dict[str, McpServerStatus]:
    async with deployment.client() as bus:
        snapshot = await read_catalog_snapshot(bus.redis, bus.topology)
    return {server.name: server for entry in snapshot.live for server in entry.mcp_servers}


async def _offered(deployment: WorkerCluster) -> dict[str, Any]:
    async with deployment.client() as bus:
        snapshot = await read_catalog_snapshot(bus.redis, bus.topology)
    return {tool.name: tool for tool in snapshot.tools()}


async def _all_connected(deployment: WorkerCluster) -> None:
    async def check() -> bool:
        servers = await _servers(deployment)
        return len(servers) == 4 and all(server.state == "connected" for server in servers.values())

    await eventually(check, timeout_s=120)


def _result(history: list[LogEntry], tool_use_id: str) -> ToolResultBlock:
    for message in live_messages(history):
        if isinstance(message, UserMessage):
            for block in message.blocks:
                if isinstance(block, ToolResultBlock) and block.tool_use_id == tool_use_id:
                    return block
    raise AssertionError(f"no result for {tool_use_id}")


def _text(block: ToolResultBlock) -> str:
    if isinstance(block.content, str):
        return block.content
    return "".join(part.text for part in block.content or [] if isinstance(part, TextBlock))


async def _turn(deployment: WorkerCluster, fake: FakeModelProcess, calls: list[Any], done: str) -> list[LogEntry]:
    session = f"mcp-{uuid.uuid4().hex[:8]}"
    fake.script(session, [reply(*calls), reply(text(done))])
    async with deployment.client() as bus:
        await bus.send_prompt(session, "use the MCP tools")
        return await wait_for(bus, session, ended_with(done), timeout_s=120)


async def test_the_catalog_offers_every_servers_tools_with_their_schema_and_a_list_changed_is_picked_up(
    deployment: WorkerCluster,
) -> None:
    await _all_connected(deployment)
    offered = await _offered(deployment)
    for name in ("mcp__everything__echo", "mcp__web__echo", "mcp__time__get_current_time", "mcp__scratch__echo"):
        assert name in offered, sorted(offered)
    echo = offered["mcp__everything__echo"]
    assert echo.description == "Echoes back the input string"
    assert echo.input_schema["properties"]["message"]["type"] == "string"
    assert "timezone" in offered["mcp__time__get_current_time"].input_schema["properties"]

    # server-everything registers get-roots-list only once the client is initialized (it declared roots), and
    # announces it with notifications/tools/list_changed: the worker lists again and the catalog has it. The
    # notification may come after the server shows "connected" (the later on a busy machine): awaited.
    async def list_changed_picked_up() -> bool:
        servers = await _servers(deployment)
        changed = servers["everything"].tools_changed >= 1
        return changed and "mcp__everything__get-roots-list" in await _offered(deployment)

    await eventually(list_changed_picked_up, timeout_s=120)
    servers = await _servers(deployment)
    assert servers["time"].required
    assert servers["scratch"].per_session

    shown = agentbus("tools", "ls", cwd=deployment.root, env=cli_env(deployment.redis_url))
    assert shown.code == 0, shown.stderr
    for line in ("everything", "web", "time [required]", "scratch [per-session]"):
        assert line in shown.stdout
    assert shown.stdout.count("connected") >= 4


async def test_the_model_calls_mcp_tools_text_image_error_denied_and_a_cut_output(
    deployment: WorkerCluster, fake: FakeModelProcess
) -> None:
    await _all_connected(deployment)
    history = await _turn(
        deployment,
        fake,
        [
            tool_use("toolu_echo", "mcp__everything__echo", message="hi over stdio"),
            tool_use("toolu_image", "mcp__web__get-tiny-image"),
            tool_use("toolu_bad_zone", "mcp__time__get_current_time", timezone="Nowhere/Bad"),
            tool_use("toolu_zone", "mcp__time__get_current_time", timezone="Europe/Paris"),
            tool_use(
                "toolu_denied", "mcp__time__convert_time", source_timezone="UTC", time="10:00", target_timezone="UTC"
            ),
            tool_use("toolu_long", "mcp__everything__echo", message="x" * (MAX_OUTPUT_CHARS + 5000)),
            tool_use("toolu_invalid", "mcp__everything__echo", wrong=1),
        ],
        "all answered",
    )
    echo = _result(history, "toolu_echo")
    assert (_text(echo), echo.is_error) == ("Echo: hi over stdio", None)
    image = _result(history, "toolu_image")
    assert isinstance(image.content, list)
    (picture,) = [block for block in image.content if isinstance(block, ImageBlock)]
    assert picture.source["type"] == "base64"
    assert picture.source["media_type"] == "image/png"
    bad_zone = _result(history, "toolu_bad_zone")
    assert bad_zone.is_error
    assert "Invalid timezone" in _text(bad_zone)
    zone = _result(history, "toolu_zone")
    assert not zone.is_error
    assert json.loads(_text(zone))["timezone"] == "Europe/Paris"
    denied = _result(history, "toolu_denied")
    assert denied.is_error
    assert "mcp__time__convert_time" in _text(denied)
    cut = _result(history, "toolu_long")
    assert "[OUTPUT TRUNCATED" in _text(cut)
    assert len(_text(cut)) < MAX_OUTPUT_CHARS + 500
    assert _result(history, "toolu_invalid").is_error  # the server validates the arguments


async def test_a_stdio_server_gets_its_configured_environment_and_none_of_the_workers_secrets(
    deployment: WorkerCluster, fake: FakeModelProcess
) -> None:
    await _all_connected(deployment)
    history = await _turn(deployment, fake, [tool_use("toolu_env", "mcp__everything__get-env")], "env read")
    env = json.loads(_text(_result(history, "toolu_env")))
    assert env["GREETING"] == GREETING  # ${MCP_TEST_GREETING} expanded from the worker's environment
    assert env["FALLBACK"] == "the-default"
    leaked = [name for name in env if name.startswith("AGENTBUS_") or name in ("REDIS_URL", "ANTHROPIC_API_KEY")]
    assert leaked == []
    assert deployment.internal_key not in json.dumps(env)


async def test_progress_notifications_become_tool_progress(deployment: WorkerCluster, fake: FakeModelProcess) -> None:
    await _all_connected(deployment)
    call = tool_use("toolu_progress", "mcp__everything__trigger-long-running-operation", duration=1.5, steps=3)
    history = await _turn(deployment, fake, [call], "progressed")
    progress = [
        entry.message.data
        for entry in history
        if isinstance(entry.message, ProgressMessage) and entry.message.parent_tool_use_id == "toolu_progress"
    ]
    assert [(item["type"], item["progress"], item["total"]) for item in progress] == [
        ("mcp_progress", 1, 3),
        ("mcp_progress", 2, 3),
        ("mcp_progress", 3, 3),
    ]
    assert progress[0]["serverName"] == "everything"
    assert "Long running operation completed" in _text(_result(history, "toolu_progress"))


async def test_an_interrupt_cancels_the_call_on_the_server(
    deployment: WorkerCluster, fake: FakeModelProcess, sent_to_everything: Path
) -> None:
    await _all_connected(deployment)
    session = f"mcp-cancel-{uuid.uuid4().hex[:8]}"
    call = tool_use("toolu_cancel", "mcp__everything__trigger-long-running-operation", duration=120, steps=120)
    fake.script(session, [reply(call), reply(text("never reached"))])
    async with deployment.client() as bus:
        await bus.send_prompt(session, "start something long")

        def progressed(history: list[LogEntry]) -> bool:
            return any(isinstance(entry.message, ProgressMessage) for entry in history)

        await wait_for(bus, session, progressed, timeout_s=120)
        await bus.interrupt(session)
        history = await wait_for(bus, session, lambda h: _has_result(h, "toolu_cancel"), timeout_s=60)
    result = _result(history, "toolu_cancel")
    assert result.is_error
    assert "reject" in _text(result).lower()
    sent = [json.loads(line) for line in sent_to_everything.read_text().splitlines() if line.strip()]
    (request,) = [
        m
        for m in sent
        if m.get("method") == "tools/call"
        and m["params"]["name"] == "trigger-long-running-operation"
        and m["params"]["arguments"].get("steps") == 120
    ]
    cancels = [m for m in sent if m.get("method") == "notifications/cancelled"]
    assert any(m["params"]["requestId"] == request["id"] for m in cancels), cancels


def _has_result(history: list[LogEntry], tool_use_id: str) -> bool:
    try:
        _result(history, tool_use_id)
    except AssertionError:
        return False
    return True


def _children(pid: int) -> list[tuple[int, str]]:
    """The processes whose parent is ``pid``, with their command lines."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode()
        except OSError:
            continue
        if int(stat.rsplit(")", 1)[1].split()[1]) == pid:
            found.append((int(entry.name), cmdline))
    return found


async def test_a_killed_server_leaves_the_catalog_and_comes_back(
    deployment: WorkerCluster, fake: FakeModelProcess
) -> None:
    await _all_connected(deployment)
    (worker,) = deployment.of("tools")
    (time_server,) = [pid for pid, cmdline in _children(worker.process.pid) if "mcp_server_time" in cmdline]
    before = (await _servers(deployment))["time"].connects
    os.kill(time_server, signal.SIGKILL)

    async def gone() -> bool:
        return "mcp__time__get_current_time" not in await _offered(deployment)

    await eventually(gone, timeout_s=30, interval_s=0.02)
    assert (await _servers(deployment))["time"].state == "restarting"
    # The server is marked required: the worker says it is not ready while the server is down (the first
    # reconnect waits AGENTBUS_TOOLS__MCP_BACKOFF_INITIAL_S = 2 s).
    with pytest.raises(urllib.error.HTTPError) as not_ready:
        urllib.request.urlopen(f"http://127.0.0.1:{worker.port}/readyz", timeout=5)
    assert not_ready.value.code == 503
    assert "mcp:time" in not_ready.value.read().decode()

    async def back() -> bool:
        servers = await _servers(deployment)
        return servers["time"].state == "connected" and servers["time"].connects > before

    await eventually(back, timeout_s=60)
    assert "mcp__time__get_current_time" in await _offered(deployment)
    history = await _turn(
        deployment, fake, [tool_use("toolu_again", "mcp__time__get_current_time", timezone="UTC")], "back again"
    )
    assert json.loads(_text(_result(history, "toolu_again")))["timezone"] == "UTC"


async def test_a_per_session_server_runs_in_each_sessions_own_workspace(
    deployment: WorkerCluster, fake: FakeModelProcess
) -> None:
    await _all_connected(deployment)
    roots = []
    for _ in range(2):
        session = f"mcp-own-{uuid.uuid4().hex[:8]}"
        fake.script(session, [reply(tool_use("toolu_roots", "mcp__scratch__get-roots-list")), reply(text("rooted"))])
        async with deployment.client() as bus:
            await bus.send_prompt(session, "where are you?")
            history = await wait_for(bus, session, ended_with("rooted"), timeout_s=120)
        workspace = (deployment.workspace / workspace_relative_dir(session, "session")).resolve()
        listed = _text(_result(history, "toolu_roots"))
        assert workspace.as_uri() in listed, listed
        roots.append(listed)
    assert roots[0] != roots[1]
    assert (await _servers(deployment))["scratch"].session_connections == 2


def test_a_bad_mcp_config_stops_the_worker_with_one_line(tmp_path: Path) -> None:
    bad = tmp_path / "bad.mcp.json"
    bad.write_text(json.dumps({"mcpServers": {"x": {"command": "run", "env": {"TOKEN": "${SURELY_NOT_SET_29}"}}}}))
    done = subprocess.run(
        [*AGENTBUS, "worker", "tools", "--mcp-config", str(bad)],
        env=cli_env("redis://127.0.0.1:1", AGENTBUS_INTERNAL_KEY="k" * 64),
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 2
    assert done.stderr.strip() == (
        f"agentbus: {bad}: mcpServers.x.env.TOKEN: environment variable(s) not set: SURELY_NOT_SET_29"
    )
