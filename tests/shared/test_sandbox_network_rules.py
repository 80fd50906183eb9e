"""Which hosts a sandboxed command may reach through the worker's proxy (``confinement/network.py``): names
normalised, wildcard and deny patterns, IP literals, ports, and the addresses a name resolves to."""

from __future__ import annotations

import ipaddress

import pytest

from agentbus_redis.confinement.bubblewrap import BRIDGE_SOCKET, NetworkBridge, SandboxPlan, bubblewrap_argv
from agentbus_redis.confinement.network import (
    DomainPattern,
    InvalidDomainPattern,
    NetworkPolicy,
    normalize_host,
    proxy_environment,
)

POLICY = NetworkPolicy.build(["pypi.org", "*.pythonhosted.org", "Bücher.de", "10.0.0.5"], ["evil.pythonhosted.org"])


@pytest.mark.parametrize(
    ("host", "normalized"),
    [
        ("PyPI.org", "pypi.org"),
        ("pypi.org.", "pypi.org"),
        (" pypi.org ", "pypi.org"),
        ("bücher.de", "xn--bcher-kva.de"),
        ("BÜCHER.DE", "xn--bcher-kva.de"),
        ("xn--bcher-kva.de", "xn--bcher-kva.de"),
        ("_dmarc.example.com", "_dmarc.example.com"),
        ("10.0.0.5", "10.0.0.5"),
        ("[2001:DB8::1]", "2001:db8::1"),
        ("2001:db8:0:0::1", "2001:db8::1"),
    ],
)
def test_hosts_are_compared_normalised(host: str, normalized: str) -> None:
    assert normalize_host(host) == normalized


@pytest.mark.parametrize(
    "host",
    ["", ".", "a..b", "-a.com", "a-.com", "a b.com", "a/b", "x" * 64 + ".com", "127.1", "0x7f.1", "2130706433",
     "example.123", "fe80::1%eth0", "a.com:443", "a@b.com"],
)  # fmt: skip
def test_what_is_not_a_host_is_refused(host: str) -> None:
    assert normalize_host(host) is None
    assert POLICY.check_target(host, 443).refusal == "invalid_host"


def test_a_name_is_allowed_only_as_listed() -> None:
    assert POLICY.check_target("pypi.org", 443).allowed
    assert POLICY.check_target("PYPI.ORG.", 443).allowed
    assert POLICY.check_target("pypi.org", 80).allowed
    assert POLICY.check_target("www.pypi.org", 443).refusal == "not_allowed"
    assert POLICY.check_target("pypi.org.evil.com", 443).refusal == "not_allowed"
    assert POLICY.check_target("notpypi.org", 443).refusal == "not_allowed"
    assert POLICY.check_target("example.com", 443).refusal == "not_allowed"


def test_a_wildcard_is_any_name_below_never_the_name_itself() -> None:
    assert POLICY.check_target("files.pythonhosted.org", 443).allowed
    assert POLICY.check_target("a.b.pythonhosted.org", 443).allowed
    assert POLICY.check_target("pythonhosted.org", 443).refusal == "not_allowed"
    assert POLICY.check_target("xpythonhosted.org", 443).refusal == "not_allowed"


def test_denied_wins_over_allowed() -> None:
    assert POLICY.check_target("evil.pythonhosted.org", 443).refusal == "denied"
    assert POLICY.check_target("EVIL.pythonhosted.org.", 443).refusal == "denied"


def test_an_internationalised_name_matches_its_a_label() -> None:
    assert POLICY.check_target("xn--bcher-kva.de", 443).allowed
    assert POLICY.check_target("bücher.de", 443).allowed


def test_ip_literals_only_when_listed_as_they_are() -> None:
    assert POLICY.check_target("10.0.0.5", 443).allowed
    assert POLICY.check_target("10.0.0.6", 443).refusal == "ip_literal"
    assert POLICY.check_target("[::1]", 443).refusal == "ip_literal"
    assert NetworkPolicy.build(["*.pythonhosted.org"]).check_target("151.101.0.223", 443).refusal == "ip_literal"


def test_only_the_policys_ports() -> None:
    assert POLICY.check_target("pypi.org", 22).refusal == "port"
    assert POLICY.check_target("pypi.org", 6379).refusal == "port"
    assert NetworkPolicy.build(["pypi.org"], ports=[8443]).check_target("pypi.org", 8443).allowed


@pytest.mark.parametrize(
    "pattern", ["*", "*.", "a.*.com", "*example.com", "pypi.org:443", "http://pypi.org", "*.10.0.0.1"]
)
def test_bad_patterns_are_refused_with_their_text(pattern: str) -> None:
    with pytest.raises(InvalidDomainPattern, match="network allow-list entry"):
        DomainPattern.parse(pattern)


def ip(text: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address:
    return ipaddress.ip_address(text)


@pytest.mark.parametrize("address", ["127.0.0.1", "127.8.9.10", "::1", "::ffff:127.0.0.1", "0.0.0.0", "::"])
def test_loopback_is_never_reached_whatever_is_listed(address: str) -> None:
    """The worker's Redis and its other ports live on loopback: not even a listed ``localhost`` or an
    allowed network reaches it (the settings refuse a loopback network too)."""
    policy = NetworkPolicy.build(["localhost", "127.0.0.1", "::1"], networks=[ipaddress.ip_network("0.0.0.0/0")])
    assert policy.check_address(ip(address), policy.check_target("localhost", 80)) == "loopback"
    assert policy.check_address(ip(address), policy.check_target(address, 80)) == "loopback"


@pytest.mark.parametrize(
    "address", ["10.1.2.3", "172.16.0.1", "192.168.1.1", "169.254.169.254", "fd00:ec2::254", "100.64.0.1",
                "fe80::1", "224.0.0.1", "203.0.113.80", "::ffff:10.0.0.1"],
)  # fmt: skip
def test_a_name_resolving_to_a_non_global_address_is_refused(address: str) -> None:
    """DNS rebinding: the allowed name is checked again at the address the proxy itself resolved."""
    assert POLICY.check_address(ip(address), POLICY.check_target("pypi.org", 443)) == "non_global_address"


def test_a_non_global_address_inside_an_allowed_network_or_listed_as_it_is() -> None:
    policy = NetworkPolicy.build(["pypi.org", "10.0.0.5"], networks=[ipaddress.ip_network("203.0.113.0/24")])
    assert policy.check_address(ip("203.0.113.80"), policy.check_target("pypi.org", 443)) is None
    assert policy.check_address(ip("10.0.0.5"), policy.check_target("10.0.0.5", 443)) is None
    assert policy.check_address(ip("10.0.0.5"), policy.check_target("pypi.org", 443)) == "non_global_address"
    assert policy.check_address(ip("151.101.0.223"), policy.check_target("pypi.org", 443)) is None


def test_no_allowed_domain_is_no_network() -> None:
    assert not NetworkPolicy().enabled
    assert not NetworkPolicy.build([], ["pypi.org"]).enabled
    assert NetworkPolicy.build(["pypi.org"]).enabled


def test_the_command_environment_points_every_client_at_the_bridge() -> None:
    env = proxy_environment(3128)
    for name in ("HTTP_PROXY", "HTTPS_PROXY", "http_proxy", "https_proxy", "ALL_PROXY", "all_proxy"):
        assert env[name] == "http://127.0.0.1:3128"
    assert env["NO_PROXY"] == env["no_proxy"] == "localhost,127.0.0.1,::1"


def test_the_bridge_is_mounted_and_started_under_the_limits_before_the_command() -> None:
    bridge = NetworkBridge(socket="/tmp/agentbus-proxy-x/proxy.sock", program="print('bridge')")
    plan = SandboxPlan(bwrap="/usr/bin/bwrap", workspace="/srv/ws/s-1", network=bridge)
    argv = bubblewrap_argv(plan, "/bin/bash", "curl https://pypi.org")
    command_at = argv.index("--")
    options = argv[:command_at]
    assert "--unshare-net" in options
    mount = options.index("--ro-bind", options.index("/srv/ws/s-1"))
    assert options[mount : mount + 3] == ["--ro-bind", "/tmp/agentbus-proxy-x/proxy.sock", BRIDGE_SOCKET]
    prelude = argv[command_at + 3]
    assert prelude.index("ulimit") < prelude.index('/usr/bin/python3 -I -S -c "$2" 3128 /run/agentbus/proxy.sock')
    assert prelude.endswith('|| exit 126; exec "$0" -c "$1"')
    assert argv[-2:] == ["curl https://pypi.org", "print('bridge')"]
    no_network = bubblewrap_argv(SandboxPlan(bwrap="/usr/bin/bwrap", workspace="/srv/ws/s-1"), "/bin/bash", "x")
    assert BRIDGE_SOCKET not in no_network
    assert "python3" not in " ".join(no_network)
