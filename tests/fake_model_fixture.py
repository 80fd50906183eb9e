"""pytest plugin: the ``fake_model`` fixture, a fake Anthropic-compatible server on loopback
(services/model/fake_server.py) for any test that needs the model side over real HTTP."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from services.model.fake_server import FakeModelServer


@pytest.fixture
def fake_model() -> Iterator[FakeModelServer]:
    """A started fake model server (fallback script ``echo``), stopped after the test. Sync, so it serves
    sync and async tests alike: ``await fake_model.script(...)`` or ``fake_model.admin.script(...)``."""
    with FakeModelServer.running(script="echo") as fake:
        yield fake
