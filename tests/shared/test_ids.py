"""The production id source mints what ``str(uuid.uuid4())`` mints: RFC 4122 version-4 UUID strings."""

from __future__ import annotations

import secrets
import uuid

import pytest

from agentbus_redis import ids

real_token_bytes = secrets.token_bytes


def test_random_uuid_is_the_uuid4_of_its_random_bytes(monkeypatch: pytest.MonkeyPatch) -> None:
    for _ in range(2_000):
        random = real_token_bytes(16)
        monkeypatch.setattr(secrets, "token_bytes", lambda size, random=random: random[:size])
        assert ids.random_uuid() == str(uuid.UUID(bytes=random, version=4))


def test_random_uuid_is_a_version_4_uuid() -> None:
    minted = [ids.random_uuid() for _ in range(10_000)]
    assert len(set(minted)) == len(minted)
    for value in minted[:1_000]:
        parsed = uuid.UUID(value)
        assert str(parsed) == value
        assert parsed.version == 4
        assert parsed.variant == uuid.RFC_4122
