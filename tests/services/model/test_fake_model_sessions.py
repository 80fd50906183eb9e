"""Scripting the fake model server (CONTRACTS.md): steps queue per session (``metadata.user_id``'s
``session_id``, M1.3), then the default queue, then the fallback; concurrent sessions never take each
other's steps; ``/_fake/requests`` records every request; bad steps are refused with their location."""

from __future__ import annotations

import asyncio
import urllib.error
from collections.abc import AsyncIterator

import anthropic
import orjson
import pytest

from services.model.fake_server import FakeModelServer
from services.model.fake_steps import ReplyStep

MODEL = "claude-test-model"


def text_step(text: str, *, chunk_delay_ms: float = 0) -> ReplyStep:
    return ReplyStep(content=[{"type": "text", "text": text}], chunk_delay_ms=chunk_delay_ms)


@pytest.fixture
async def fake() -> AsyncIterator[FakeModelServer]:
    async with FakeModelServer.start(port=0) as server:
        yield server


@pytest.fixture
async def client(fake: FakeModelServer) -> AsyncIterator[anthropic.AsyncAnthropic]:
    async with anthropic.AsyncAnthropic(base_url=fake.base_url, api_key="test", max_retries=0) as sdk:
        yield sdk


async def reply_text(client: anthropic.AsyncAnthropic, session: str | None, prompt: str = "hello") -> str:
    """One streamed request of ``session``; the reply's text."""
    metadata: anthropic.types.MetadataParam | anthropic.Omit = anthropic.omit
    if session is not None:
        metadata = {"user_id": orjson.dumps({"device_id": "d", "account_uuid": "", "session_id": session}).decode()}
    async with client.messages.stream(
        model=MODEL, max_tokens=50, messages=[{"role": "user", "content": prompt}], metadata=metadata
    ) as stream:
        message = await stream.get_final_message()
    block = message.content[0]
    assert block.type == "text"
    return block.text


async def test_m1_3_session_queue_then_default_queue_then_fallback(
    fake: FakeModelServer, client: anthropic.AsyncAnthropic
) -> None:
    await fake.script("a", [text_step("a1")])
    await fake.script(None, [text_step("default1")])
    assert await reply_text(client, "a") == "a1"
    assert await reply_text(client, "a") == "default1"
    assert await reply_text(client, "a", "again") == "You said: again"


async def test_concurrent_sessions_take_only_their_own_steps_in_order(
    fake: FakeModelServer, client: anthropic.AsyncAnthropic
) -> None:
    sessions = [f"s{n}" for n in range(6)]
    for session in sessions:
        # A delay per event interleaves the streams; the queue order must still hold per session.
        await fake.script(session, [text_step(f"{session}-{turn}", chunk_delay_ms=2) for turn in range(4)])

    async def converse(session: str) -> list[str]:
        return [await reply_text(client, session) for _ in range(4)]

    replies = await asyncio.gather(*(converse(session) for session in sessions))
    assert replies == [[f"{session}-{turn}" for turn in range(4)] for session in sessions]
    recorded = await fake.requests()
    assert len(recorded) == 24
    assert {r.step_kind for r in recorded} == {"reply"}
    for session in sessions:
        assert len(await fake.requests(session)) == 4


async def test_requests_records_bodies_headers_and_steps_in_order(
    fake: FakeModelServer, client: anthropic.AsyncAnthropic
) -> None:
    await fake.script("rec", [text_step("scripted")])
    assert await reply_text(client, "rec", "first") == "scripted"
    assert await reply_text(client, "rec", "second") == "You said: second"
    await reply_text(client, None, "anonymous")
    everything = await fake.requests()
    assert [r.session_id for r in everything] == ["rec", "rec", None]
    recorded = await fake.requests("rec")
    assert [r.step_kind for r in recorded] == ["reply", "echo"]
    assert recorded[0].at_ms <= recorded[1].at_ms
    first = recorded[0]
    assert isinstance(first.body, dict)
    assert first.body["messages"] == [{"role": "user", "content": "first"}]
    assert first.body["stream"] is True
    assert first.headers["authorization"] == "Bearer test"  # SDK 2.13 sends the API key as a bearer token
    assert first.headers["anthropic-version"]
    await fake.reset()
    assert await fake.requests() == []


async def test_reset_drops_queued_steps(fake: FakeModelServer, client: anthropic.AsyncAnthropic) -> None:
    assert await fake.script("r", [text_step("never")]) == 1
    await fake.reset()
    assert await reply_text(client, "r", "x") == "You said: x"


async def test_script_refuses_a_bad_step_with_its_location(fake: FakeModelServer) -> None:
    bad = {"kind": "reply", "content": [{"type": "text", "text": "ok"}, {"type": "tool_use", "input": {}}]}
    with pytest.raises(urllib.error.HTTPError) as raised:
        fake.admin._call("POST", "/_fake/script", {"session_id": "x", "steps": [bad]})
    with raised.value as error:
        assert error.code == 400
        problems = orjson.loads(error.read())["error"]
    assert problems[0]["loc"][:3] == ["steps", 0, "reply"]
    assert "content.1: a `tool_use` block needs name" in problems[0]["msg"]
    assert await fake.requests() == []


async def test_unparsable_metadata_user_id_uses_the_default_queue(
    fake: FakeModelServer, client: anthropic.AsyncAnthropic
) -> None:
    await fake.script(None, [text_step("default")])
    message = await client.messages.create(
        model=MODEL, max_tokens=5, messages=[{"role": "user", "content": "x"}], metadata={"user_id": "not json"}
    )
    assert message.content[0].type == "text"
    assert message.content[0].text == "default"
    assert [r.session_id for r in await fake.requests()] == [None]
