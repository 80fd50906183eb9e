"""Issue 28, "Bash (and any tool or stdio MCP server that asks for it) runs under bubblewrap": stdio MCP servers
run by a real tool worker under its sandbox, called by the fake model through the bus.

The deployment sandboxes every stdio server by default (``AGENTBUS_TOOLS__MCP_SANDBOX``) with the virtualenv
mounted read-only for all of them; one entry opts out. Servers no one on the project wrote —
``mcp-server-time`` (PyPI) and ``@modelcontextprotocol/server-everything`` (npm, whose ``get-env`` tool returns
its environment) — start, list their tools and answer calls sandboxed; a probe server of our own
(``mcp_probe/probe_server.py``) reports what it can see from inside: not the worker's secrets in its
environment, not the worker's ``/proc/<pid>/environ``, not Redis on the loopback, not the tools root — only its
own directory (shared connection) or its session's workspace (per-session connection). A server allow-listed
a domain reaches it through the worker's proxy and nothing else; the others have no network at all.
"""

from __future__ import annotations

import ipaddress
import json
import socket
import sys
import urllib.request
import uuid
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

import pytest

from agentbus_redis.bus.events import LogEntry
from agentbus_redis.config.settings import ToolSettings
from agentbus_redis.confinement.network import NetworkPolicy
from agentbus_redis.confinement.workspaces import workspace_relative_dir
from agentbus_redis.mcp.config import McpConfigError, McpSandboxOptions
from agentbus_redis.messages.content import TextBlock, ToolResultBlock
from agentbus_redis.messages.kinds import UserMessage
from agentbus_redis.sandbox.runner import Sandbox
from agentbus_redis.sandbox.workspaces import SERVERS_DIR
from agentbus_redis.tools.catalog import McpServerStatus
from agentbus_redis.workers.tools.app import server_sandboxes
from tests.cli.process import agentbus, cli_env
from tests.compat.npm_clients import MCP_SERVER_EVERYTHING, NpmUnreachable, ensure_installed, install_dir
from tests.integration.cluster import TEST_ALLOW_RULES, WorkerCluster, eventually
from tests.integration.fake_model import FakeModelProcess
from tests.integration.model_turns import ended_with, live_messages, reply, text, tool_use, wait_for
from tests.integration.test_mcp_servers import _servers

pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.timeout(300)]

PROBE_DIR = Path(__file__).with_name("mcp_probe")
PROBE = PROBE_DIR / "probe_server.py"
SERVERS = ("time", "everything", "probe", "session_probe", "netprobe", "bare")


def pypi_non_global() -> list[str]:
    """pypi.org's addresses here that are not global (this machine resolves it to a documentation address)."""
    infos = socket.getaddrinfo("pypi.org", 443, type=socket.SOCK_STREAM)
    return [str(a) for a in {ipaddress.ip_address(str(i[4][0])) for i in infos} if not a.is_global]


@pytest.fixture(scope="module")
def everything_dir() -> Path:
    try:
        ensure_installed(MCP_SERVER_EVERYTHING)
    except NpmUnreachable as unreachable:
        pytest.skip(str(unreachable))
    return install_dir(MCP_SERVER_EVERYTHING)


@pytest.fixture(scope="module")
def deployment(module_cluster: WorkerCluster, fake: FakeModelProcess, everything_dir: Path) -> WorkerCluster:
    module_cluster.forked = False  # the probe reads /proc/<worker pid>/environ: it must be the worker's own
    everything_js = everything_dir / "node_modules" / MCP_SERVER_EVERYTHING.package / "dist" / "index.js"
    probe = {"command": sys.executable, "args": [str(PROBE)], "env": {"PROBE_CONFIGURED": "from-the-entry"}}
    config = {
        "mcpServers": {
            # Sandboxed by the deployment's default: no agentbus key at all.
            "time": {"command": sys.executable, "args": ["-m", "mcp_server_time", "--local-timezone", "UTC"]},
            "everything": {
                "command": "node",
                "args": [str(everything_js), "stdio"],
                "agentbus": {"required": True, "sandbox": {"readOnlyPaths": [str(everything_dir)]}},
            },
            "probe": {**probe, "agentbus": {"sandbox": {"readOnlyPaths": [str(PROBE_DIR)]}}},
            "session_probe": {
                **probe,
                "agentbus": {"perSession": True, "sandbox": {"readOnlyPaths": [str(PROBE_DIR)]}},
            },
            "netprobe": {
                **probe,
                "agentbus": {"sandbox": {"readOnlyPaths": [str(PROBE_DIR)], "allowedDomains": ["pypi.org"]}},
            },
            "bare": {"command": sys.executable, "args": [str(PROBE)], "agentbus": {"sandbox": False}},
        }
    }
    config_path = module_cluster.root / ".mcp.json"
    config_path.write_text(json.dumps(config), encoding="utf-8")
    module_cluster.extra_env.update(
        {
            "ANTHROPIC_API_KEY": "sk-ant-sandboxed-mcp",
            "AGENTBUS_MODEL__BASE_URL": fake.base_url,
            "AGENTBUS_TOOLS__MCP_CONFIG": json.dumps([str(config_path)]),
            "AGENTBUS_TOOLS__MCP_SANDBOX": "true",
            "AGENTBUS_TOOLS__MCP_SANDBOX_READ_ONLY_PATHS": json.dumps(sorted({sys.prefix, sys.base_prefix})),
            "AGENTBUS_TOOLS__ALLOW": json.dumps([*TEST_ALLOW_RULES, *(f"mcp__{name}" for name in SERVERS)]),
            "AGENTBUS_TOOLS__TIMEOUT_S": "90",
            "AGENTBUS_TOOLS__WORKSPACE_SCOPE": "session",
            "AGENTBUS_TOOLS__MCP_BACKOFF_INITIAL_S": "1",
            "AGENTBUS_TOOLS__MCP_BACKOFF_MAX_S": "4",
            "AGENTBUS_TOOLS__SANDBOX_NETWORK__ALLOWED_DOMAINS": json.dumps(["pypi.org", "*.pythonhosted.org"]),
            "AGENTBUS_TOOLS__SANDBOX_NETWORK__ALLOWED_NETWORKS": json.dumps(pypi_non_global()),
        }
    )
    for name in ("ingestion", "normalization", "transcripts", "tools", "model"):
        module_cluster.start(name)
    module_cluster.wait_ready(timeout_s=240)  # ready once the required (sandboxed) server-everything is connected
    return module_cluster


async def _all_connected(deployment: WorkerCluster) -> dict[str, McpServerStatus]:
    found: dict[str, McpServerStatus] = {}

    async def check() -> bool:
        found.update(await _servers(deployment))
        return set(found) == set(SERVERS) and all(server.state == "connected" for server in found.values())

    await eventually(check, timeout_s=120)
    return found


def _text(history: list[LogEntry], tool_use_id: str) -> tuple[str, bool]:
    for message in live_messages(history):
        if isinstance(message, UserMessage):
            for block in message.blocks:
                if isinstance(block, ToolResultBlock) and block.tool_use_id == tool_use_id:
                    content = block.content
                    joined = (
                        content
                        if isinstance(content, str)
                        else "".join(part.text for part in content or [] if isinstance(part, TextBlock))
                    )
                    return joined, bool(block.is_error)
    raise AssertionError(f"no result for {tool_use_id}")


async def _turn(
    deployment: WorkerCluster, fake: FakeModelProcess, calls: list[Any], session: str | None = None
) -> list[LogEntry]:
    session = session or f"mcpbox-{uuid.uuid4().hex[:8]}"
    done = f"done-{uuid.uuid4().hex[:6]}"
    fake.script(session, [reply(*calls), reply(text(done))])
    async with deployment.client() as bus:
        await bus.send_prompt(session, "use the MCP tools")
        return await wait_for(bus, session, ended_with(done), timeout_s=180)


def _worker_pid(deployment: WorkerCluster) -> int:
    [worker] = deployment.of("tools")
    return worker.process.pid


def _probe_call(tool_use_id: str, server: str, deployment: WorkerCluster, outside: Path) -> Any:
    port = urlparse(deployment.redis_url).port
    return tool_use(
        tool_use_id,
        f"mcp__{server}__probe",
        worker_pid=_worker_pid(deployment),
        port=port,
        outside=str(outside),
        written=f"written-{tool_use_id}",
    )


def _secrets(deployment: WorkerCluster) -> list[str]:
    return [deployment.internal_key, deployment.redis_url, "sk-ant-sandboxed-mcp"]


async def test_servers_others_wrote_start_list_and_answer_sandboxed(
    deployment: WorkerCluster, fake: FakeModelProcess
) -> None:
    servers = await _all_connected(deployment)
    assert {name for name, server in servers.items() if server.sandboxed} == set(SERVERS) - {"bare"}
    shown = agentbus("tools", "ls", cwd=deployment.root, env=cli_env(deployment.redis_url))
    assert shown.code == 0, shown.stderr
    for line in ("time [sandboxed]", "everything [required] [sandboxed]", "session_probe [per-session] [sandboxed]"):
        assert line in shown.stdout, shown.stdout
    assert "bare [sandboxed]" not in shown.stdout
    with urllib.request.urlopen(f"http://127.0.0.1:{deployment.of('tools')[0].port}/readyz", timeout=10) as answer:
        sandbox = json.loads(answer.read())["checks"]["sandbox"]
    assert "MCP servers sandboxed: everything, netprobe, probe, session_probe, time" in sandbox["detail"], sandbox
    history = await _turn(
        deployment,
        fake,
        [
            tool_use("toolu_time", "mcp__time__get_current_time", timezone="Europe/Paris"),
            tool_use("toolu_echo", "mcp__everything__echo", message="hi from the sandbox"),
            tool_use("toolu_env", "mcp__everything__get-env"),
        ],
    )
    answer, is_error = _text(history, "toolu_time")
    assert not is_error, answer
    assert json.loads(answer)["timezone"] == "Europe/Paris"
    assert _text(history, "toolu_echo") == ("Echo: hi from the sandbox", False)
    environment, is_error = _text(history, "toolu_env")
    assert not is_error, environment
    assert '"HOME"' in environment  # the process's own environment, as the server reports it
    for name in ("AGENTBUS_INTERNAL_KEY", "REDIS_URL", "ANTHROPIC_API_KEY", "AGENTBUS_TOOLS__MCP_CONFIG"):
        assert name not in environment
    for secret in _secrets(deployment):
        assert secret not in environment


async def test_a_sandboxed_server_sees_no_secret_no_worker_no_redis_and_only_its_own_directory(
    deployment: WorkerCluster, fake: FakeModelProcess
) -> None:
    await _all_connected(deployment)
    session = f"mcpbox-{uuid.uuid4().hex[:8]}"
    other = f"mcpbox-other-{uuid.uuid4().hex[:8]}"
    other_workspace = (deployment.workspace / workspace_relative_dir(other, "session")).resolve()
    other_workspace.mkdir(parents=True)
    (other_workspace / "secret.txt").write_text("another session's file")
    calls = [
        _probe_call("toolu_shared", "probe", deployment, other_workspace),
        _probe_call("toolu_session", "session_probe", deployment, other_workspace),
        _probe_call("toolu_bare", "bare", deployment, other_workspace),
    ]
    history = await _turn(deployment, fake, calls, session)
    reports = {}
    for call in ("toolu_shared", "toolu_session", "toolu_bare"):
        answer, is_error = _text(history, call)
        assert not is_error, answer
        reports[call] = json.loads(answer)
    own_dir = (deployment.workspace / SERVERS_DIR / "probe").resolve()
    session_workspace = (deployment.workspace / workspace_relative_dir(session, "session")).resolve()
    for call, cwd in (("toolu_shared", own_dir), ("toolu_session", session_workspace)):
        report = reports[call]
        assert report["cwd"] == str(cwd)
        assert report["environ"]["PROBE_CONFIGURED"] == "from-the-entry"  # its configured env
        assert report["environ"]["HOME"] == str(cwd)
        for name in ("AGENTBUS_INTERNAL_KEY", "REDIS_URL", "ANTHROPIC_API_KEY", "LOGNAME", "USER", "SHELL"):
            assert name not in report["environ"], (call, name)
        dumped = json.dumps(report)
        for secret in _secrets(deployment):
            assert secret not in dumped, call
        assert report["pid"] < 10  # its own PID namespace: the worker is not there
        assert report["worker_environ"].startswith("refused"), report["worker_environ"]
        assert report["worker_cmdline"].startswith("refused"), report["worker_cmdline"]
        assert report["loopback"].startswith("refused: ConnectionRefusedError"), report["loopback"]  # no Redis
        assert report["outside_listing"].startswith("refused"), report["outside_listing"]
        assert report["outside_write"].startswith("refused"), report["outside_write"]
        assert report["cwd_write"] == "done: 5"
        assert (cwd / f"written-{call}").read_text() == "probe"
    assert sorted(path.name for path in other_workspace.iterdir()) == ["secret.txt", "written-toolu_bare"]
    # The bare server (opted out) is an ordinary child of the worker: it sees the worker's processes and writes
    # in another session's workspace — what the sandbox takes away — though it does not get the worker's
    # environment variables (the SDK's minimal environment).
    bare = reports["toolu_bare"]
    assert _worker_pid(deployment) in bare["processes"]
    assert bare["outside_write"] == "done: 5"
    assert "AGENTBUS_INTERNAL_KEY" not in bare["environ"]


async def test_a_sandboxed_server_reaches_only_its_allow_list_through_the_proxy(
    deployment: WorkerCluster, fake: FakeModelProcess
) -> None:
    await _all_connected(deployment)
    history = await _turn(
        deployment,
        fake,
        [
            tool_use("toolu_pypi", "mcp__netprobe__fetch", url="https://pypi.org/simple/"),
            tool_use("toolu_files", "mcp__netprobe__fetch", url="https://files.pythonhosted.org/"),
            tool_use("toolu_none", "mcp__probe__fetch", url="https://pypi.org/simple/"),
        ],
    )
    assert _text(history, "toolu_pypi") == ("status 200", False)
    files, _ = _text(history, "toolu_files")  # the deployment allows it; the server's own list does not
    assert "Tunnel connection failed: 403" in files, files
    nothing, _ = _text(history, "toolu_none")  # no allow-list: no proxy, no network
    assert nothing.startswith("failed"), nothing
    assert "403" not in nothing, nothing


def test_a_server_asking_for_more_than_the_deployment_allows_stops_the_worker(tmp_path: Path) -> None:
    """The server's list is checked against the deployment's when the worker starts (a config error naming the
    entry), as a mounted tools root is."""
    sandbox = Sandbox(bwrap="/usr/bin/bwrap")
    deployment = NetworkPolicy.build(["pypi.org"])
    wider = {"net": McpSandboxOptions(allowed_domains=["pypi.org", "example.com"])}
    with pytest.raises(McpConfigError, match=r"mcpServers\.net\.agentbus\.sandbox\.allowedDomains: .*'example\.com'"):
        server_sandboxes(sandbox, wider, deployment, ToolSettings(), tmp_path)
    for path in (tmp_path, tmp_path.parent, tmp_path / "sessions"):
        holding = {"p": McpSandboxOptions(read_only_paths=[str(path)])}
        with pytest.raises(McpConfigError, match=r"mcpServers\.p\.agentbus\.sandbox\.readOnlyPaths: .*tools root"):
            server_sandboxes(sandbox, holding, deployment, ToolSettings(), tmp_path)
    fine = server_sandboxes(
        sandbox, {"ok": McpSandboxOptions(allowed_domains=["pypi.org"])}, deployment, ToolSettings(), tmp_path
    )
    assert [str(pattern) for pattern in fine["ok"].network.allowed] == ["pypi.org"]
