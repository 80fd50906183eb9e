"""Issue 28, network for sandboxed commands only through the worker's allow-listing proxy: real commands
(curl, python3) run by the Bash tool under the worker's bubblewrap sandbox, reaching the outside through the
bridge in their namespace and the proxy on its Unix socket — which admits allow-listed names only, resolves
them itself and never connects to loopback or a non-global address it was not told to.

PyPI must be reachable from the machine running these tests (the brief of issue 28 says it is). On this
machine pypi.org resolves to a documentation-range address (203.0.113.80, not global): the test that reaches
it allows exactly the addresses pypi.org resolves to when they are not global, and the rebinding test uses
that same fact (a listed name that resolves to a non-global address is refused).
"""

from __future__ import annotations

import asyncio
import ipaddress
import os
import random
import re
import socket
from collections.abc import AsyncIterator
from dataclasses import dataclass, replace
from pathlib import Path

import pytest
from prometheus_client import REGISTRY
from pydantic import ValidationError

from agentbus_redis.config.settings import Settings, ToolSettings
from agentbus_redis.confinement.network import IPNetwork, NetworkPolicy
from agentbus_redis.sandbox.proxy import DomainProxy
from agentbus_redis.sandbox.runner import Sandbox, SandboxUnavailable
from agentbus_redis.tools.tool import ToolContext, ToolError, ToolOutput
from agentbus_redis.workers.tools.builtin.bash import BashTool
from agentbus_redis.workers.tools.workspace import Workspace
from tests.services.test_tools_bash import all_gone, processes_with

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]

CURL_CODE = "curl -sS -o /dev/null -w '%{http_code}' --max-time 60"
METRIC = "agentbus_sandbox_network_requests_total"


def pypi_addresses() -> list[ipaddress.IPv4Address | ipaddress.IPv6Address]:
    infos = socket.getaddrinfo("pypi.org", 443, type=socket.SOCK_STREAM)
    return [ipaddress.ip_address(str(info[4][0])) for info in infos]


def pypi_networks() -> list[IPNetwork]:
    """The non-global addresses pypi.org resolves to here (none where it resolves to global ones)."""
    return [ipaddress.ip_network(a) for a in pypi_addresses() if not a.is_global]


@dataclass
class Box:
    tool: BashTool
    proxy: DomainProxy
    bridge_port: int

    async def run(self, command: str, ctx: ToolContext | None = None) -> ToolOutput:
        parsed = self.tool.input_model.model_validate({"command": command, "timeout": 120_000})
        ctx = ctx or ToolContext(tool_use_id="toolu_net")
        events = [event async for event in self.tool.call(parsed, ctx)]
        output = events[-1]
        assert isinstance(output, ToolOutput)
        return output


async def boxed(tmp_path: Path, policy: NetworkPolicy) -> AsyncIterator[Box]:
    sandbox = Sandbox.for_this_process()
    workspace = tmp_path / "ws"
    workspace.mkdir()
    if sandbox.owner is not None:
        os.chown(workspace, *sandbox.owner)
    proxy = DomainProxy(policy, tmp_path / "proxy" / "proxy.sock")
    await proxy.start()
    try:
        sandbox = sandbox.with_proxy(proxy)
        assert sandbox.network is not None
        port = random.randint(20_000, 60_000)  # the bridge's own marker in the process list
        sandbox = replace(sandbox, network=replace(sandbox.network, port=port))
        await sandbox.check(workspace)
        yield Box(BashTool(Workspace.at(workspace), sandbox=sandbox), proxy, port)
    finally:
        await proxy.stop()


@pytest.fixture
async def pypi_box(tmp_path: Path) -> AsyncIterator[Box]:
    policy = NetworkPolicy.build(
        ["pypi.org", "*.pythonhosted.org"], ["evil.pythonhosted.org"], networks=pypi_networks()
    )
    async for box in boxed(tmp_path, policy):
        yield box


def counted(decision: str, reason: str) -> float:
    return REGISTRY.get_sample_value(METRIC, {"decision": decision, "reason": reason}) or 0.0


async def test_an_allowed_domain_is_reached_through_the_proxy(pypi_box: Box) -> None:
    allowed = counted("allowed", "allowed")
    output = await pypi_box.run(f"{CURL_CODE} https://pypi.org/simple/")
    assert not output.is_error, output.content
    assert output.content == "200", output.content
    urllib = "import urllib.request as r; print(r.urlopen('https://pypi.org/simple/six/', timeout=60).status)"
    output = await pypi_box.run(f'python3 -c "{urllib}"')
    assert not output.is_error, output.content
    assert output.content == "200", output.content
    assert counted("allowed", "allowed") >= allowed + 2


async def test_another_domain_gets_a_403_the_command_sees(pypi_box: Box) -> None:
    denied = counted("denied", "not_allowed")
    output = await pypi_box.run(f"{CURL_CODE} https://example.com/")
    assert output.is_error, output.content
    assert "CONNECT tunnel failed, response 403" in output.content, output.content
    output = await pypi_box.run("curl -sS --max-time 60 -i http://example.com/")
    assert "HTTP/1.1 403 Forbidden" in output.content
    assert "example.com:80 is not allowed" in output.content
    assert "X-Proxy-Error: blocked-by-allowlist" in output.content
    # A refused request's body is read and dropped: the client sees the 403, not a connection reset.
    post = "head -c 2000000 /dev/zero > /tmp/body; curl -sS -i --max-time 60 -H 'Expect:' --data-binary @/tmp/body"
    output = await pypi_box.run(f"{post} http://example.com/ | head -1")
    assert output.content.strip() == "HTTP/1.1 403 Forbidden", output.content
    output = await pypi_box.run(f"{CURL_CODE} https://evil.pythonhosted.org/")
    assert "response 403" in output.content
    assert counted("denied", "not_allowed") >= denied + 2


async def test_a_sessions_narrower_list_is_served_on_a_socket_of_its_own(pypi_box: Box) -> None:
    """Per-session allow-lists: the command runs bridged to a socket the proxy serves with the session's policy
    (the deployment's narrowed), removed when the command ends; the deployment's socket is left as it was."""
    deployment = pypi_box.proxy.policy
    only_files = ToolContext(tool_use_id="toolu_net", sandbox_network=deployment.narrowed(["*.pythonhosted.org"]))
    output = await pypi_box.run(f"{CURL_CODE} https://pypi.org/simple/", only_files)
    assert output.is_error, output.content
    assert "response 403" in output.content, output.content
    output = await pypi_box.run("curl -sS --max-time 60 -i http://pypi.org/simple/", only_files)
    assert "pypi.org:80 is not allowed (not_allowed)" in output.content, output.content
    output = await pypi_box.run(f"{CURL_CODE} https://files.pythonhosted.org/", only_files)
    assert "response 403" not in output.content, output.content  # reached (whatever the page answers)
    assert sorted(path.name for path in pypi_box.proxy.socket_path.parent.iterdir()) == ["proxy.sock"]
    output = await pypi_box.run(f"{CURL_CODE} https://pypi.org/simple/")  # another session: the deployment's
    assert output.content == "200", output.content
    nothing = ToolContext(tool_use_id="toolu_net", sandbox_network=deployment.narrowed([]))
    output = await pypi_box.run("env | grep -ic _proxy=; ls /run/agentbus 2>&1 | head -1", nothing)
    assert output.content.splitlines()[0] == "0", output.content  # no bridge, no proxy variables
    refused = ToolContext(tool_use_id="toolu_net", sandbox_network_refused="entry 'evil.com' is not allowed")
    with pytest.raises(ToolError, match=re.escape("The command was not run: entry 'evil.com' is not allowed")):
        await pypi_box.run("echo never", refused)


async def test_without_the_proxy_there_is_no_route(pypi_box: Box) -> None:
    address = pypi_addresses()[0]
    output = await pypi_box.run(f"curl -sS --noproxy '*' --max-time 20 -k https://{address}/")
    assert output.is_error
    assert "Network is unreachable" in output.content or "Couldn't connect" in output.content
    output = await pypi_box.run("curl -sS --noproxy '*' --max-time 20 https://pypi.org/")
    assert output.is_error
    assert "Could not resolve host" in output.content
    connect = f"import socket; socket.create_connection(('{address}', 443), timeout=20)"
    output = await pypi_box.run(f'python3 -c "{connect}"')
    assert output.is_error, output.content
    assert "Network is unreachable" in output.content, output.content


async def test_loopback_is_refused_even_when_listed(tmp_path: Path) -> None:
    """Redis (6379) and every other port of the worker's loopback: through the proxy by name, by address,
    CONNECT or plain HTTP — refused although ``localhost``, ``127.0.0.1``, this machine's hostname and
    the ports are listed."""
    hostname = socket.gethostname()
    policy = NetworkPolicy.build(["localhost", "127.0.0.1", "::1", hostname], ports=[80, 443, 6379])
    async for box in boxed(tmp_path, policy):
        before = counted("denied", "loopback")
        for target in ("localhost:6379", "127.0.0.1:6379", "[::1]:6379", f"{hostname}:6379", "localhost:443"):
            output = await box.run(f"curl -sS --max-time 20 --noproxy '' -p -o /dev/null http://{target}/")
            assert output.is_error, (target, output.content)
            assert "response 403" in output.content, (target, output.content)
            output = await box.run(f"curl -sS --max-time 20 --noproxy '' -i http://{target}/")
            assert "403 Forbidden" in output.content, (target, output.content)
            assert "(loopback)" in output.content, (target, output.content)
        assert counted("denied", "loopback") >= before + 10


async def test_a_listed_name_resolving_to_a_non_global_address_is_refused(tmp_path: Path) -> None:
    """DNS rebinding: the proxy resolves the name itself and checks the address it will connect to."""
    if not pypi_networks():
        pytest.skip("pypi.org resolves to global addresses here (the rule itself: tests/shared)")
    async for box in boxed(tmp_path, NetworkPolicy.build(["pypi.org"])):
        output = await box.run(f"{CURL_CODE} https://pypi.org/simple/")
        assert output.is_error, output.content
        assert "response 403" in output.content, output.content
        output = await box.run("curl -sS --max-time 20 -i http://pypi.org/simple/")
        assert "(non_global_address)" in output.content, output.content


async def test_the_bridge_ends_with_its_command(pypi_box: Box) -> None:
    marker = f"\0{pypi_box.bridge_port}\0/run/agentbus/proxy.sock"
    output = await pypi_box.run(f"{CURL_CODE} https://pypi.org/simple/ && echo && ps -eo comm | grep -cx python3")
    assert output.content.splitlines() == ["200", "1"], output.content  # the bridge, while the command ran
    assert await all_gone(marker), processes_with(marker)
    output = await pypi_box.run("sleep 600 & disown; echo started")
    assert output.content == "started"
    assert await all_gone(marker), processes_with(marker)


async def test_without_domains_the_sandbox_has_no_proxy_and_no_network(tmp_path: Path) -> None:
    sandbox = Sandbox.for_this_process()
    workspace = tmp_path / "ws"
    workspace.mkdir()
    if sandbox.owner is not None:
        os.chown(workspace, *sandbox.owner)
    tool = BashTool(Workspace.at(workspace), sandbox=sandbox)
    parsed = tool.input_model.model_validate({"command": "env | grep -ic _proxy=; ls /run/agentbus 2>&1 | head -1"})
    events = [event async for event in tool.call(parsed, ToolContext(tool_use_id="toolu_net"))]
    output = events[-1]
    assert isinstance(output, ToolOutput)
    assert output.content.splitlines()[0] == "0"
    assert "No such file or directory" in output.content
    assert "there is no network access" in tool.description()


def test_the_allow_list_is_read_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AGENTBUS_TOOLS__SANDBOX_NETWORK__ALLOWED_DOMAINS", '["pypi.org","*.pythonhosted.org"]')
    monkeypatch.setenv("AGENTBUS_TOOLS__SANDBOX_NETWORK__DENIED_DOMAINS", '["evil.pythonhosted.org"]')
    monkeypatch.setenv("AGENTBUS_TOOLS__SANDBOX_NETWORK__ALLOWED_NETWORKS", '["10.20.0.0/16"]')
    policy = Settings(_env_file=None).tools.sandbox_network.policy()  # type: ignore[call-arg]
    assert policy.check_target("files.pythonhosted.org", 443).allowed
    assert policy.check_target("evil.pythonhosted.org", 443).refusal == "denied"
    assert policy.networks == (ipaddress.ip_network("10.20.0.0/16"),)
    assert not ToolSettings().sandbox_network.policy().enabled  # the default: no network


@pytest.mark.parametrize(
    ("name", "value", "says"),
    [
        ("ALLOWED_DOMAINS", '["*"]', "network allow-list entry '*'"),
        ("DENIED_DOMAINS", '["http://x.com"]', "network allow-list entry 'http://x.com'"),
        ("ALLOWED_NETWORKS", '["127.0.0.0/8"]', "loopback is never reachable"),
        ("ALLOWED_NETWORKS", '["0.0.0.0/0"]', "loopback is never reachable"),
        ("ALLOWED_PORTS", "[0]", "not TCP ports"),
    ],
)
def test_a_bad_entry_is_refused_with_its_text(
    monkeypatch: pytest.MonkeyPatch, name: str, value: str, says: str
) -> None:
    monkeypatch.setenv(f"AGENTBUS_TOOLS__SANDBOX_NETWORK__{name}", value)
    with pytest.raises(ValidationError, match=re.escape(says)):
        Settings(_env_file=None)  # type: ignore[call-arg]


async def test_a_bridge_that_cannot_start_stops_the_check_and_says_why(tmp_path: Path) -> None:
    sandbox = Sandbox.for_this_process()
    workspace = tmp_path / "ws"
    workspace.mkdir()
    if sandbox.owner is not None:
        os.chown(workspace, *sandbox.owner)
    proxy = DomainProxy(NetworkPolicy.build(["pypi.org"]), tmp_path / "proxy" / "proxy.sock")
    await proxy.start()
    try:
        broken = sandbox.with_proxy(proxy, "/usr/bin/no-such-python3")
        with pytest.raises(SandboxUnavailable, match="the network bridge could not start"):
            await broken.check(workspace)
    finally:
        await proxy.stop()


async def test_past_its_connection_cap_the_proxy_answers_503(tmp_path: Path) -> None:
    proxy = DomainProxy(NetworkPolicy.build(["pypi.org"]), tmp_path / "proxy" / "proxy.sock", max_connections=1)
    await proxy.start()
    try:
        _, held = await asyncio.open_unix_connection(str(proxy.socket_path))  # sends nothing: stays open
        reader, writer = await asyncio.open_unix_connection(str(proxy.socket_path))
        writer.write(b"CONNECT pypi.org:443 HTTP/1.1\r\nHost: pypi.org:443\r\n\r\n")
        answer = await reader.read()
        assert answer.startswith(b"HTTP/1.1 503 Service Unavailable\r\n"), answer
        writer.close()
        held.close()
    finally:
        await proxy.stop()
