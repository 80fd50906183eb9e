"""Issue 28, network by domain through the bus: a tool worker process whose deployment allow-lists pypi.org
runs the fake model's Bash calls in its sandbox; they reach PyPI through the worker's proxy and nothing else —
not another domain, not Redis on the worker's loopback, not a direct connection — and the decisions show in
the worker's log, its metrics and ``/readyz``. (The escape suite runs the same worker without an allow-list:
no network at all.)"""

from __future__ import annotations

import ipaddress
import json
import socket
import urllib.request
import uuid
from urllib.parse import urlparse

import pytest
import redis

from agentbus_redis.confinement.session_network import SessionSandboxNetwork
from agentbus_redis.model.session_config import SessionModelConfig
from agentbus_redis.streams.topology import Topology
from tests.integration.cluster import WorkerCluster
from tests.integration.fake_model import FakeModelProcess
from tests.integration.test_sandbox_escapes import (
    ALLOW,
    API_KEY,
    assert_healthy,
    bash,
    new_session,
    tools_worker_pid,
)

pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.timeout(600)]

CURL_CODE = "curl -sS -o /dev/null -w '%{http_code}' --max-time 60"


def pypi_non_global() -> list[str]:
    """pypi.org's addresses here that are not global (on this machine it resolves to 203.0.113.80): allowed
    explicitly, as a deployment behind such an address would."""
    infos = socket.getaddrinfo("pypi.org", 443, type=socket.SOCK_STREAM)
    return [str(a) for a in {ipaddress.ip_address(str(i[4][0])) for i in infos} if not a.is_global]


@pytest.fixture(scope="module")
def deployment(module_cluster: WorkerCluster, fake: FakeModelProcess) -> WorkerCluster:
    module_cluster.extra_env.update(
        {
            "ANTHROPIC_API_KEY": API_KEY,
            "AGENTBUS_MODEL__BASE_URL": fake.base_url,
            "AGENTBUS_TOOLS__WORKSPACE_SCOPE": "session",
            "AGENTBUS_TOOLS__PERMISSION_MODE": "bypassPermissions",
            "AGENTBUS_TOOLS__ALLOW": json.dumps(ALLOW),
            "LOG_LEVEL": "INFO",  # the proxy logs each decision at info
            "AGENTBUS_TOOLS__TIMEOUT_S": "90",
            "AGENTBUS_TOOLS__DEADLINE_S": "180",
            "AGENTBUS_TOOLS__SANDBOX_NETWORK__ALLOWED_DOMAINS": json.dumps(["pypi.org", "*.pythonhosted.org"]),
            "AGENTBUS_TOOLS__SANDBOX_NETWORK__DENIED_DOMAINS": json.dumps(["evil.pythonhosted.org"]),
            "AGENTBUS_TOOLS__SANDBOX_NETWORK__ALLOWED_NETWORKS": json.dumps(pypi_non_global()),
        }
    )
    for name in ("ingestion", "normalization", "transcripts", "tools", "model"):
        module_cluster.start(name)
    module_cluster.wait_ready(timeout_s=240)
    return module_cluster


def worker_metrics(cluster: WorkerCluster) -> str:
    [worker] = cluster.of("tools")
    with urllib.request.urlopen(f"http://127.0.0.1:{worker.port}/metrics", timeout=10) as answer:
        return str(answer.read().decode())


async def test_an_allowed_domain_is_reached_and_nothing_else(deployment: WorkerCluster, fake: FakeModelProcess) -> None:
    pid = tools_worker_pid(deployment)
    result = await bash(deployment, fake, f"{CURL_CODE} https://pypi.org/simple/", timeout_ms=90_000)
    assert result.text == "200", result
    result = await bash(deployment, fake, f"{CURL_CODE} https://example.com/", timeout_ms=90_000)
    assert result.is_error
    assert "CONNECT tunnel failed, response 403" in result.text
    result = await bash(deployment, fake, f"{CURL_CODE} https://evil.pythonhosted.org/", timeout_ms=90_000)
    assert "response 403" in result.text
    result = await bash(deployment, fake, "curl -sS --noproxy '*' --max-time 20 https://pypi.org/")
    assert "Could not resolve host" in result.text
    metrics = worker_metrics(deployment)
    assert 'agentbus_sandbox_network_requests_total{decision="allowed",reason="allowed"}' in metrics
    assert 'agentbus_sandbox_network_requests_total{decision="denied",reason="not_allowed"}' in metrics
    assert 'agentbus_sandbox_network_requests_total{decision="denied",reason="denied"}' in metrics
    logs = deployment.logs()
    assert "sandbox_network" in logs
    assert "example.com" in logs
    await assert_healthy(deployment, fake, pid)


async def test_redis_is_out_of_reach_through_the_proxy(deployment: WorkerCluster, fake: FakeModelProcess) -> None:
    redis_url = urlparse(deployment.redis_url)
    canary = f"netproxy:canary:{uuid.uuid4().hex}"
    client = redis.Redis.from_url(deployment.redis_url)
    client.set(canary, "still here")
    for target in (f"127.0.0.1:{redis_url.port}", f"localhost:{redis_url.port}", "127.0.0.1:443"):
        command = f"curl -sS --max-time 20 --noproxy '' -p -X FLUSHALL http://{target}/"
        result = await bash(deployment, fake, command)
        assert result.is_error, result
        assert "response 403" in result.text, result
    assert client.get(canary) == b"still here"
    client.close()


async def test_readyz_names_the_allowed_domains(deployment: WorkerCluster) -> None:
    [worker] = deployment.of("tools")
    with urllib.request.urlopen(f"http://127.0.0.1:{worker.port}/readyz", timeout=10) as answer:
        checks = json.loads(answer.read())["checks"]
    assert checks["sandbox"]["ok"] is True
    assert "network: only through the proxy, to pypi.org, *.pythonhosted.org" in checks["sandbox"]["detail"]


def configure_session(cluster: WorkerCluster, session: str, network: SessionSandboxNetwork) -> None:
    """The session's own config beside it, as a producer stores it (``SessionModelConfig.sandbox_network``)."""
    config = SessionModelConfig(sandbox_network=network.model_dump(exclude_unset=True))
    client = redis.Redis.from_url(cluster.redis_url)
    client.set(Topology(cluster.names).session_config(session), config.to_wire_json())
    client.close()


async def test_each_session_gets_its_own_narrower_list(deployment: WorkerCluster, fake: FakeModelProcess) -> None:
    """Two sessions served by one worker at the same time: one narrowed to PyPI's files host, one to
    pypi.org; each reaches its own and is refused the other's — the proxy applies the calling session's
    policy. A session asking for more than the deployment allows has its command refused, naming the entry."""
    files_only, pypi_only, wider = new_session(), new_session(), new_session()
    configure_session(deployment, files_only, SessionSandboxNetwork(allowed_domains=["*.pythonhosted.org"]))
    configure_session(deployment, pypi_only, SessionSandboxNetwork(allowed_domains=["pypi.org"]))
    configure_session(deployment, wider, SessionSandboxNetwork(allowed_domains=["pypi.org", "example.com"]))
    pypi, files = f"{CURL_CODE} https://pypi.org/simple/", f"{CURL_CODE} https://files.pythonhosted.org/"
    result = await bash(deployment, fake, pypi, session=pypi_only, timeout_ms=90_000)
    assert result.text == "200", result
    result = await bash(deployment, fake, files, session=pypi_only, timeout_ms=90_000)
    assert result.is_error, result
    assert "response 403" in result.text, result
    result = await bash(deployment, fake, pypi, session=files_only, timeout_ms=90_000)
    assert result.is_error, result
    assert "response 403" in result.text, result
    result = await bash(deployment, fake, files, session=files_only, timeout_ms=90_000)
    assert "response 403" not in result.text, result
    result = await bash(deployment, fake, "echo never", session=wider)
    assert result.is_error, result
    assert "The command was not run" in result.text, result
    assert "'example.com': the deployment does not allow it" in result.text, result
    result = await bash(deployment, fake, pypi, timeout_ms=90_000)  # a session without a list: the deployment's
    assert result.text == "200", result
    assert "sandbox_network_refused" in deployment.logs()
