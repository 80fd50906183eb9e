"""pytest plugin: the ``fake_model`` fixture, a fake Anthropic-compatible server on loopback
(workers/model/fake_server.py) for any test that needs the model side over real HTTP, and
``fake_model_sdk``, the official async client pointed at it."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator

import anthropic
import pytest

from agentbus_redis.workers.model.fake_server import FakeModelServer


@pytest.fixture
def fake_model() -> Iterator[FakeModelServer]:
    """A started fake model server (fallback script ``echo``), stopped after the test. Sync, so it serves
    sync and async tests alike: ``await fake_model.script(...)`` or ``fake_model.admin.script(...)``."""
    with FakeModelServer.running(script="echo") as fake:
        yield fake


@pytest.fixture
async def fake_model_sdk(fake_model: FakeModelServer) -> AsyncIterator[anthropic.AsyncAnthropic]:
    """``AsyncAnthropic`` on :func:`fake_model`, SDK retries off (M1.2). Closed after the test: a client
    left to the garbage collector can break CPython 3.11.7's ``ast.parse`` for the rest of the run."""
    async with anthropic.AsyncAnthropic(base_url=fake_model.base_url, api_key="test", max_retries=0) as client:
        yield client
