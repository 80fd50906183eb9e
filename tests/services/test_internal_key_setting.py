"""Issue 15: the ingestion and tool workers need the worker secret (AGENTBUS_INTERNAL_KEY) to sign and
check internal events; without it they refuse to start rather than dead-letter every tool result."""

from __future__ import annotations

import pytest

from agentbus_redis.bus.ingress_limits import DEFAULT_MAX_INGRESS_ENTRY_BYTES
from agentbus_redis.config.settings import MissingInternalKey, Settings


def test_workers_refuse_to_run_without_the_internal_key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("AGENTBUS_INTERNAL_KEY", raising=False)
    with pytest.raises(MissingInternalKey, match="AGENTBUS_INTERNAL_KEY"):
        Settings(_env_file=None).require_internal_key()


def test_the_internal_key_and_the_size_limit_come_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("AGENTBUS_INTERNAL_KEY", "s3cret")
    monkeypatch.setenv("AGENTBUS_MAX_INGRESS_ENTRY_BYTES", "65536")
    settings = Settings(_env_file=None)
    assert settings.require_internal_key() == b"s3cret"
    assert settings.max_ingress_entry_bytes == 65536
    assert "s3cret" not in repr(settings)  # a secret, never logged


def test_the_default_size_limit_is_the_messages_api_request_limit(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("AGENTBUS_MAX_INGRESS_ENTRY_BYTES", raising=False)
    assert Settings(_env_file=None).max_ingress_entry_bytes == DEFAULT_MAX_INGRESS_ENTRY_BYTES
