"""A worker's HTTP endpoints (/metrics, /healthz, /readyz) listen where ``AGENTBUS_HTTP_HOST`` says
(issue 15): loopback by default — nothing on the network sees them unless asked — and every interface
when a container sets ``0.0.0.0``. Checked on real worker processes, through the kernel's socket table."""

from __future__ import annotations

import ipaddress
from pathlib import Path

import pytest

from tests.integration.cluster import WorkerCluster

pytestmark = [pytest.mark.integration]


def listening_addresses(port: int) -> set[str]:
    """The local addresses of the IPv4 sockets listening on ``port`` (``/proc/net/tcp``, state 0A)."""
    found = set()
    for row in Path("/proc/net/tcp").read_text().splitlines()[1:]:
        fields = row.split()
        address, _, hex_port = fields[1].partition(":")
        if fields[3] == "0A" and int(hex_port, 16) == port:
            found.add(str(ipaddress.IPv4Address(bytes.fromhex(address)[::-1])))
    return found


@pytest.mark.parametrize(("host", "expected"), [(None, "127.0.0.1"), ("0.0.0.0", "0.0.0.0")])
def test_worker_listens_on_agentbus_http_host(cluster: WorkerCluster, host: str | None, expected: str) -> None:
    if host is not None:
        cluster.extra_env["AGENTBUS_HTTP_HOST"] = host
    (worker,) = cluster.start("transcripts")
    cluster.wait_ready()
    assert listening_addresses(worker.port) == {expected}
