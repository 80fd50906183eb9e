"""Scripting the fake model server (CONTRACTS.md): steps queue per session (``metadata.user_id``'s
``session_id``, M1.3), then the default queue, then the fallback; concurrent sessions never take each
other's steps; ``/_fake/requests`` records every request; bad steps are refused with their location."""

from __future__ import annotations

import asyncio
import urllib.error

import anthropic
import orjson
import pytest

from agentbus_redis.json_types import JsonValue
from agentbus_redis.workers.model.fake_server import FakeModelServer
from agentbus_redis.workers.model.fake_steps import RecordedRequest, ReplyStep

MODEL = "claude-test-model"


def text_step(text: str, *, chunk_delay_ms: float = 0) -> ReplyStep:
    return ReplyStep(content=[{"type": "text", "text": text}], chunk_delay_ms=chunk_delay_ms)


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
    fake_model: FakeModelServer, fake_model_sdk: anthropic.AsyncAnthropic
) -> None:
    await fake_model.script("a", [text_step("a1")])
    await fake_model.script(None, [text_step("default1")])
    assert await reply_text(fake_model_sdk, "a") == "a1"
    assert await reply_text(fake_model_sdk, "a") == "default1"
    assert await reply_text(fake_model_sdk, "a", "again") == "You said: again"


async def test_concurrent_sessions_take_only_their_own_steps_in_order(
    fake_model: FakeModelServer, fake_model_sdk: anthropic.AsyncAnthropic
) -> None:
    sessions = [f"s{n}" for n in range(6)]
    for session in sessions:
        # A delay per event interleaves the streams; the queue order must still hold per session.
        await fake_model.script(session, [text_step(f"{session}-{turn}", chunk_delay_ms=2) for turn in range(4)])

    async def converse(session: str) -> list[str]:
        return [await reply_text(fake_model_sdk, session) for _ in range(4)]

    replies = await asyncio.gather(*(converse(session) for session in sessions))
    assert replies == [[f"{session}-{turn}" for turn in range(4)] for session in sessions]
    recorded = await fake_model.requests()
    assert len(recorded) == 24
    assert {r.step_kind for r in recorded} == {"reply"}
    for session in sessions:
        assert len(await fake_model.requests(session)) == 4


async def test_requests_records_bodies_headers_and_steps_in_order(
    fake_model: FakeModelServer, fake_model_sdk: anthropic.AsyncAnthropic
) -> None:
    await fake_model.script("rec", [text_step("scripted")])
    assert await reply_text(fake_model_sdk, "rec", "first") == "scripted"
    assert await reply_text(fake_model_sdk, "rec", "second") == "You said: second"
    await reply_text(fake_model_sdk, None, "anonymous")
    everything = await fake_model.requests()
    assert [r.session_id for r in everything] == ["rec", "rec", None]
    recorded = await fake_model.requests("rec", settled=True)
    assert [r.step_kind for r in recorded] == ["reply", "echo"]
    assert recorded[0].at_ms <= recorded[1].at_ms
    assert [r.ended for r in recorded] == ["answered", "answered"]
    first = recorded[0]
    assert isinstance(first.body, dict)
    assert first.body["messages"] == [{"role": "user", "content": "first"}]
    assert first.body["stream"] is True
    assert first.headers["authorization"] == "Bearer test"  # SDK 2.13 sends the API key as a bearer token
    assert first.headers["anthropic-version"]
    await fake_model.reset()
    assert await fake_model.requests() == []


async def test_reset_drops_queued_steps(fake_model: FakeModelServer, fake_model_sdk: anthropic.AsyncAnthropic) -> None:
    assert await fake_model.script("r", [text_step("never")]) == 1
    await fake_model.reset()
    assert await reply_text(fake_model_sdk, "r", "x") == "You said: x"


async def test_script_refuses_a_bad_step_with_its_location(fake_model: FakeModelServer) -> None:
    bad = {"kind": "reply", "content": [{"type": "text", "text": "ok"}, {"type": "tool_use", "input": {}}]}
    with pytest.raises(urllib.error.HTTPError) as raised:
        fake_model.admin._call("POST", "/_fake/script", {"session_id": "x", "steps": [bad]})
    with raised.value as error:
        assert error.code == 400
        problems = orjson.loads(error.read())["error"]
    assert problems[0]["loc"][:3] == ["steps", 0, "reply"]
    assert "content.1: a `tool_use` block needs name" in problems[0]["msg"]
    assert await fake_model.requests() == []


async def test_unparsable_metadata_user_id_uses_the_default_queue(
    fake_model: FakeModelServer, fake_model_sdk: anthropic.AsyncAnthropic
) -> None:
    await fake_model.script(None, [text_step("default")])
    message = await fake_model_sdk.messages.create(
        model=MODEL, max_tokens=5, messages=[{"role": "user", "content": "x"}], metadata={"user_id": "not json"}
    )
    assert message.content[0].type == "text"
    assert message.content[0].text == "default"
    assert [r.session_id for r in await fake_model.requests()] == [None]


async def test_only_the_latest_requests_are_kept() -> None:
    async with (
        FakeModelServer.start(keep_requests=2) as fake,
        anthropic.AsyncAnthropic(base_url=fake.base_url, api_key="test", max_retries=0) as sdk,
    ):
        for prompt in ("one", "two", "three"):
            await reply_text(sdk, None, prompt)
        kept = await fake.requests()
    assert [prompt_of(r) for r in kept] == ["two", "three"]


def prompt_of(record: RecordedRequest) -> JsonValue:
    """The first message's content of a recorded request."""
    assert isinstance(record.body, dict)
    messages = record.body["messages"]
    assert isinstance(messages, list)
    assert isinstance(messages[0], dict)
    return messages[0]["content"]
