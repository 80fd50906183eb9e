"""A session's own network allow-list narrows the deployment's, never widens it (``confinement/network.py``
``NetworkPolicy.narrowed``, ``confinement/session_network.py``): issue 28, "per-session or per-deployment
allow-lists go through a proxy the worker runs". Pure rules, no Redis."""

from __future__ import annotations

import json
import re

import pytest

from agentbus_redis.confinement.network import DomainNotAllowed, DomainPattern, InvalidDomainPattern, NetworkPolicy
from agentbus_redis.confinement.session_network import (
    InvalidSessionNetwork,
    SessionSandboxNetwork,
    session_network_policy,
)
from agentbus_redis.model.session_config import SessionModelConfig

DEPLOYMENT = NetworkPolicy.build(
    ["pypi.org", "*.pythonhosted.org", "*.example.com", "10.0.0.5"],
    ["evil.pythonhosted.org", "*.secret.example.com"],
    ports=[443],
)


@pytest.mark.parametrize(
    ("wide", "narrow", "covered"),
    [
        ("pypi.org", "pypi.org", True),
        ("pypi.org", "PyPI.org.", True),
        ("pypi.org", "www.pypi.org", False),
        ("*.example.com", "a.example.com", True),
        ("*.example.com", "a.b.example.com", True),
        ("*.example.com", "example.com", False),  # a wildcard is the names below, not the name itself
        ("*.example.com", "*.example.com", True),
        ("*.example.com", "*.a.example.com", True),
        ("*.a.example.com", "*.example.com", False),
        ("example.com", "*.example.com", False),  # an exact entry never covers a wildcard
        ("*.example.com", "*.xample.com", False),
        ("*.example.com", "badexample.com", False),
        ("10.0.0.5", "10.0.0.5", True),
    ],
)
def test_which_patterns_cover_which(wide: str, narrow: str, covered: bool) -> None:
    assert DomainPattern.parse(wide).covers(DomainPattern.parse(narrow)) is covered


def test_a_narrowed_policy_allows_only_its_own_entries_under_the_deployments_rules() -> None:
    policy = DEPLOYMENT.narrowed(["pypi.org", "*.a.example.com"], ["bad.a.example.com"])
    assert [str(pattern) for pattern in policy.allowed] == ["pypi.org", "*.a.example.com"]
    assert policy.check_target("pypi.org", 443).allowed
    assert policy.check_target("x.a.example.com", 443).allowed
    assert policy.check_target("files.pythonhosted.org", 443).refusal == "not_allowed"  # the deployment's, not its
    assert policy.check_target("bad.a.example.com", 443).refusal == "denied"  # its own deny
    assert policy.check_target("pypi.org", 80).refusal == "port"  # the deployment's ports stay
    assert policy.ports == DEPLOYMENT.ports
    assert policy.networks == DEPLOYMENT.networks


def test_the_deployments_denied_entries_hold_inside_a_narrowed_wildcard() -> None:
    policy = DEPLOYMENT.narrowed(["*.pythonhosted.org", "*.example.com"])
    assert policy.check_target("evil.pythonhosted.org", 443).refusal == "denied"
    assert policy.check_target("x.secret.example.com", 443).refusal == "denied"
    assert policy.check_target("files.pythonhosted.org", 443).allowed


def test_none_keeps_the_deployments_list_and_empty_allows_nothing() -> None:
    assert DEPLOYMENT.narrowed(None) == DEPLOYMENT
    nothing = DEPLOYMENT.narrowed([])
    assert not nothing.enabled
    assert nothing.check_target("pypi.org", 443).refusal == "not_allowed"
    assert DEPLOYMENT.narrowed(None, ["pypi.org"]).check_target("pypi.org", 443).refusal == "denied"


@pytest.mark.parametrize(
    ("entry", "why"),
    [
        ("evil.com", "does not allow it"),
        ("*.pypi.org", "does not allow it"),  # pypi.org is listed, the names below it are not
        ("*.com", "does not allow it"),  # wider than *.example.com: refused, not cut down
        ("example.com", "does not allow it"),
        ("10.0.0.6", "does not allow it"),
        ("evil.pythonhosted.org", "denies it"),
        ("*.secret.example.com", "denies it"),
        ("x.secret.example.com", "denies it"),
    ],
)
def test_an_entry_the_deployment_does_not_allow_is_refused_by_name(entry: str, why: str) -> None:
    with pytest.raises(DomainNotAllowed) as raised:
        DEPLOYMENT.narrowed(["pypi.org", entry])
    assert raised.value.pattern == entry
    assert repr(entry) in str(raised.value)
    assert why in str(raised.value)


def test_a_deployment_without_network_cannot_be_widened() -> None:
    with pytest.raises(DomainNotAllowed, match="allows no network"):
        NetworkPolicy().narrowed(["pypi.org"])
    assert NetworkPolicy().narrowed([]) == NetworkPolicy()


def test_a_bad_pattern_is_refused_by_name() -> None:
    with pytest.raises(InvalidDomainPattern, match=re.escape("'a..b'")):
        DEPLOYMENT.narrowed(["a..b"])
    with pytest.raises(InvalidDomainPattern, match=re.escape("'*'")):
        DEPLOYMENT.narrowed(None, ["*"])


def _config(network: object) -> bytes:
    return json.dumps({"model": "claude-x", "sandbox_network": network}).encode()


def test_the_session_config_narrows_the_deployment() -> None:
    policy = session_network_policy(DEPLOYMENT, _config({"allowed_domains": ["pypi.org"]}))
    assert [str(pattern) for pattern in policy.allowed] == ["pypi.org"]
    assert session_network_policy(DEPLOYMENT, None) is DEPLOYMENT  # no config
    assert session_network_policy(DEPLOYMENT, b'{"model": "claude-x"}') is DEPLOYMENT  # none in it
    assert session_network_policy(DEPLOYMENT, _config(None)) is DEPLOYMENT
    assert not session_network_policy(DEPLOYMENT, _config({"allowed_domains": []})).enabled


@pytest.mark.parametrize(
    ("raw", "named"),
    [
        (_config({"allowed_domains": ["pypi.org", "evil.com"]}), "'evil.com'"),
        (_config({"allowed_domains": ["a..b"]}), "'a..b'"),
        (_config({"denied_domains": ["*"]}), "'*'"),
        (_config({"allowed": ["pypi.org"]}), "sandbox_network.allowed"),
        (_config(["pypi.org"]), "sandbox_network"),
        (b"{not json", "not JSON"),
    ],
)
def test_a_session_network_that_cannot_be_used_fails_closed_naming_the_entry(raw: bytes, named: str) -> None:
    with pytest.raises(InvalidSessionNetwork) as raised:
        session_network_policy(DEPLOYMENT, raw)
    assert named in str(raised.value)


def test_producers_build_the_config_with_the_typed_model() -> None:
    network = SessionSandboxNetwork(allowed_domains=["pypi.org"])
    config = SessionModelConfig(sandbox_network=network.model_dump(exclude_unset=True))
    policy = session_network_policy(DEPLOYMENT, config.to_wire_json())
    assert [str(pattern) for pattern in policy.allowed] == ["pypi.org"]
    with pytest.raises(ValueError, match=re.escape("'bad name'")):
        SessionSandboxNetwork(allowed_domains=["bad name"])
