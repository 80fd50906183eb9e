"""The fake model server answers like the Messages API, as the official SDK sees it (M2.1, M2.2, M2.4,
M2.6, M1.3): streamed replies accumulate to the scripted Message, raw events come in the API's order,
non-streaming requests get the whole Message, and the fallback scripts answer unscripted requests."""

from __future__ import annotations

import re
import urllib.request

import anthropic
import orjson

from agentbus_redis.workers.model.fake_server import FakeModelServer
from agentbus_redis.workers.model.fake_steps import ReplyStep

MODEL = "claude-test-model"
PROMPT: list[anthropic.types.MessageParam] = [{"role": "user", "content": "Read both files, please."}]


def metadata(session: str) -> anthropic.types.MetadataParam:
    """M1.3: ``metadata.user_id`` is a JSON string carrying the session id."""
    return {"user_id": orjson.dumps({"device_id": "d", "account_uuid": "", "session_id": session}).decode()}


THINKING_TEXT_TWO_TOOLS = ReplyStep(
    content=[
        {"type": "thinking", "thinking": "The user wants two files; I can read them in parallel."},
        {"type": "text", "text": "Reading both files now, in parallel."},
        {"type": "tool_use", "name": "Read", "input": {"file_path": "README.md"}},
        {"type": "tool_use", "name": "Read", "input": {"file_path": "app.py", "limit": 200}},
    ],
    usage={"input_tokens": 1200, "cache_read_input_tokens": 50000, "output_tokens": 412},
    chunk_chars=7,
)


async def test_m2_4_streamed_reply_accumulates_thinking_text_and_parallel_tool_use(
    fake_model: FakeModelServer, fake_model_sdk: anthropic.AsyncAnthropic
) -> None:
    await fake_model.script("s1", [THINKING_TEXT_TWO_TOOLS])
    async with fake_model_sdk.messages.stream(
        model=MODEL, max_tokens=1024, messages=PROMPT, metadata=metadata("s1")
    ) as s:
        message = await s.get_final_message()
    assert re.fullmatch(r"msg_01[A-Za-z0-9]{22}", message.id)
    assert message.model == MODEL
    assert message.stop_reason == "tool_use"
    thinking, text, first, second = message.content
    assert thinking.type == "thinking"
    assert thinking.thinking == "The user wants two files; I can read them in parallel."
    assert thinking.signature
    assert text.type == "text"
    assert text.text == "Reading both files now, in parallel."
    assert first.type == "tool_use"
    assert second.type == "tool_use"
    assert (first.name, first.input) == ("Read", {"file_path": "README.md"})
    assert (second.name, second.input) == ("Read", {"file_path": "app.py", "limit": 200})
    assert re.fullmatch(r"toolu_01[A-Za-z0-9]{22}", first.id)
    assert first.id != second.id
    assert (message.usage.input_tokens, message.usage.cache_read_input_tokens) == (1200, 50000)
    assert message.usage.output_tokens == 412


async def test_m2_1_raw_events_come_in_api_order_with_deltas_per_block(
    fake_model: FakeModelServer, fake_model_sdk: anthropic.AsyncAnthropic
) -> None:
    await fake_model.script("s1", [THINKING_TEXT_TWO_TOOLS])
    stream = await fake_model_sdk.messages.create(
        model=MODEL, max_tokens=1024, messages=PROMPT, metadata=metadata("s1"), stream=True
    )
    events = [event async for event in stream]
    kinds = [e.type for e in events]
    assert kinds[0] == "message_start"
    assert kinds[-2:] == ["message_delta", "message_stop"]
    start = events[0]
    assert start.type == "message_start"
    assert start.message.content == []
    assert start.message.stop_reason is None
    assert start.message.usage.input_tokens == 1200
    assert start.message.usage.output_tokens == 1
    blocks = [e for e in events if e.type in ("content_block_start", "content_block_delta", "content_block_stop")]
    assert [e.index for e in blocks] == sorted(e.index for e in blocks)
    by_index: dict[int, list[str]] = {}
    for event in blocks:
        by_index.setdefault(event.index, []).append(
            event.delta.type if event.type == "content_block_delta" else event.type
        )
    thinking, text, first, _ = by_index.values()
    assert thinking[0] == "content_block_start"
    assert thinking[-2:] == ["signature_delta", "content_block_stop"]
    assert thinking.count("thinking_delta") > 1
    assert text.count("text_delta") > 1
    assert first.count("input_json_delta") > 1
    delta = events[-2]
    assert delta.type == "message_delta"
    assert delta.delta.stop_reason == "tool_use"
    assert delta.usage.output_tokens == 412
    assert delta.usage.input_tokens == 1200


async def test_m2_1_sse_frames_are_event_and_data_lines_with_a_ping(fake_model: FakeModelServer) -> None:
    await fake_model.script(None, [ReplyStep(content=[{"type": "text", "text": "hi"}])])
    body = {"model": MODEL, "max_tokens": 10, "stream": True, "messages": PROMPT}
    request = urllib.request.Request(
        fake_model.base_url + "/v1/messages", data=orjson.dumps(body), headers={"x-api-key": "k"}, method="POST"
    )
    with urllib.request.build_opener(urllib.request.ProxyHandler({})).open(request) as response:
        assert response.headers["content-type"] == "text/event-stream; charset=utf-8"
        assert response.headers["request-id"].startswith("req_")
        raw = response.read().decode()
    frames = raw.split("\n\n")
    assert frames[-1] == ""
    names = []
    for frame in frames[:-1]:
        event_line, data_line = frame.split("\n")
        name = event_line.removeprefix("event: ")
        assert orjson.loads(data_line.removeprefix("data: "))["type"] == name
        names.append(name)
    assert names[:2] == ["message_start", "ping"]


async def test_m2_6_delta_usage_is_sent_verbatim(
    fake_model: FakeModelServer, fake_model_sdk: anthropic.AsyncAnthropic
) -> None:
    step = ReplyStep(
        content=[{"type": "text", "text": "ok"}],
        usage={"input_tokens": 1200, "cache_read_input_tokens": 50000},
        delta_usage={"input_tokens": 0, "output_tokens": 412},
    )
    await fake_model.script(None, [step])
    stream = await fake_model_sdk.messages.create(model=MODEL, max_tokens=10, messages=PROMPT, stream=True)
    events = [event async for event in stream]
    assert events[0].type == "message_start"
    assert events[0].message.usage.cache_read_input_tokens == 50000
    delta = next(e for e in events if e.type == "message_delta")
    assert delta.usage.model_dump(exclude_none=True) == {"input_tokens": 0, "output_tokens": 412}


async def test_non_streaming_request_gets_the_whole_message(
    fake_model: FakeModelServer, fake_model_sdk: anthropic.AsyncAnthropic
) -> None:
    await fake_model.script(None, [THINKING_TEXT_TWO_TOOLS.model_copy(update={"model": "claude-haiku-4-5"})])
    message = await fake_model_sdk.messages.create(model=MODEL, max_tokens=1024, messages=PROMPT)
    assert [block.type for block in message.content] == ["thinking", "text", "tool_use", "tool_use"]
    assert message.model == "claude-haiku-4-5"
    assert message.stop_reason == "tool_use"
    assert message.usage.output_tokens == 412


async def test_echo_fallback_and_echo_marker_repeat_the_last_user_text(
    fake_model: FakeModelServer, fake_model_sdk: anthropic.AsyncAnthropic
) -> None:
    message = await fake_model_sdk.messages.create(model=MODEL, max_tokens=10, messages=PROMPT)
    assert message.content[0].type == "text"
    assert message.content[0].text == "You said: Read both files, please."
    assert message.stop_reason == "end_turn"
    await fake_model.script(
        None, [ReplyStep(content=[{"type": "text", "text": "<<{{echo}}>>"}], stop_reason="max_tokens")]
    )
    async with fake_model_sdk.messages.stream(model=MODEL, max_tokens=10, messages=PROMPT) as s:
        echoed = await s.get_final_message()
    assert echoed.content[0].type == "text"
    assert echoed.content[0].text == "<<Read both files, please.>>"
    assert echoed.stop_reason == "max_tokens"


def tool_round(reply: anthropic.types.Message) -> list[anthropic.types.MessageParam]:
    """The assistant reply and a user message answering each of its tool calls."""
    calls = [block for block in reply.content if block.type == "tool_use"]
    results: list[anthropic.types.ToolResultBlockParam] = [
        {"type": "tool_result", "tool_use_id": c.id, "content": "ok"} for c in calls
    ]
    assistant: anthropic.types.MessageParam = {"role": "assistant", "content": reply.content}
    return [assistant, {"role": "user", "content": results}]


async def test_demo_script_plays_the_tour_by_assistant_turns_with_fresh_tool_ids() -> None:
    async with (
        FakeModelServer.start(script="demo") as fake,
        anthropic.AsyncAnthropic(base_url=fake.base_url, api_key="test", max_retries=0) as client,
    ):
        history: list[anthropic.types.MessageParam] = [{"role": "user", "content": "Take a tour."}]
        first = await client.messages.create(model=MODEL, max_tokens=100, messages=history)
        again = await client.messages.create(model=MODEL, max_tokens=100, messages=history)
        assert [b.name for b in first.content if b.type == "tool_use"] == ["Glob", "Read", "Read", "Bash"]
        assert first.stop_reason == "tool_use"
        first_ids = {b.id for b in first.content if b.type == "tool_use"}
        assert first_ids.isdisjoint(b.id for b in again.content if b.type == "tool_use")
        history += tool_round(first)
        async with client.messages.stream(model=MODEL, max_tokens=100, messages=history) as s:
            second = await s.get_final_message()
        assert [b.name for b in second.content if b.type == "tool_use"] == ["Write", "Bash"]
        history += tool_round(second)
        third = await client.messages.create(model=MODEL, max_tokens=100, messages=history)
        assert third.stop_reason == "end_turn"
        assert third.content[0].type == "text"
        assert third.content[0].text.startswith("Done.")
        history += [{"role": "assistant", "content": "Done."}, {"role": "user", "content": "Thanks!"}]
        after = await client.messages.create(model=MODEL, max_tokens=100, messages=history)
        assert after.content[0].type == "text"
        assert after.content[0].text == "You said: Thanks!"
        assert [r.step_kind for r in await fake.requests()] == ["demo"] * 5


def test_fake_model_fixture_serves_sync_tests(fake_model: FakeModelServer) -> None:
    fake_model.admin.script(None, [{"kind": "reply", "content": [{"type": "text", "text": "scripted"}]}])
    with anthropic.Anthropic(base_url=fake_model.base_url, api_key="test", max_retries=0) as fake_model_sdk:
        message = fake_model_sdk.messages.create(model=MODEL, max_tokens=10, messages=PROMPT)
    assert message.content[0].type == "text"
    assert message.content[0].text == "scripted"
    assert [r.step_kind for r in fake_model.admin.requests()] == ["reply"]
