"""Injected faults reach an SDK client as the real API's would (M2.3, M3.1–M3.4, M8.2): error statuses
map to the SDK's exception classes with the API's error body and headers, a mid-stream ``error`` event
raises from the stream, a dropped connection breaks the stream, a hang ends in the client's timeout,
and slow or hanging requests never hold up others."""

from __future__ import annotations

import asyncio
import urllib.error
import urllib.request

import anthropic
import httpx2
import orjson
import pytest

from agentbus_redis.workers.model.fake_server import FakeModelServer
from agentbus_redis.workers.model.fake_steps import HangStep, HttpErrorStep, ReplyStep, prompt_too_long_message

MODEL = "claude-test-model"
PROMPT: list[anthropic.types.MessageParam] = [{"role": "user", "content": "Tell me a long story."}]
STORY = ReplyStep(content=[{"type": "text", "text": "Once upon a time there was a message bus. " * 3}])


async def ask(client: anthropic.AsyncAnthropic) -> anthropic.types.Message:
    return await client.messages.create(model=MODEL, max_tokens=100, messages=PROMPT)


async def read_into(seen: list[str], stream: anthropic.AsyncStream[anthropic.types.RawMessageStreamEvent]) -> None:
    """Iterate ``stream`` to its end, noting each event's type in ``seen`` (kept when the stream raises)."""
    async for event in stream:
        seen.append(event.type)


@pytest.mark.parametrize(
    ("step", "error_class", "error_type"),
    [
        (HttpErrorStep(status=429, headers={"retry-after": "7"}), anthropic.RateLimitError, "rate_limit_error"),
        (HttpErrorStep(status=529), anthropic.OverloadedError, "overloaded_error"),
        (HttpErrorStep(status=500), anthropic.InternalServerError, "api_error"),
        (HttpErrorStep(status=413), anthropic.ContentTooLargeError, "request_too_large"),
        (HttpErrorStep(status=401), anthropic.AuthenticationError, "authentication_error"),
        (HttpErrorStep(status=503, error_type="api_error"), anthropic.ServiceUnavailableError, "api_error"),
    ],
    ids=lambda value: str(value.status) if isinstance(value, HttpErrorStep) else "",
)
async def test_m3_1_http_error_step_raises_the_sdk_class_with_the_api_error_body(
    fake_model: FakeModelServer,
    fake_model_sdk: anthropic.AsyncAnthropic,
    step: HttpErrorStep,
    error_class: type[anthropic.APIStatusError],
    error_type: str,
) -> None:
    await fake_model.script(None, [step])
    with pytest.raises(error_class) as raised:
        await ask(fake_model_sdk)
    error = raised.value
    assert error.status_code == step.status
    assert isinstance(error.body, dict)
    assert error.body["type"] == "error"
    assert error.body["error"]["type"] == error_type
    assert error.body["request_id"] == error.request_id == error.response.headers["request-id"]
    for name, value in step.headers.items():
        assert error.response.headers[name] == value


async def test_m3_3_retry_headers_are_set_per_step(
    fake_model: FakeModelServer, fake_model_sdk: anthropic.AsyncAnthropic
) -> None:
    headers = {"retry-after": "2", "retry-after-ms": "1500", "x-should-retry": "false"}
    await fake_model.script(None, [HttpErrorStep(status=429, headers=headers), HttpErrorStep(status=529)])
    with pytest.raises(anthropic.RateLimitError) as limited:
        await ask(fake_model_sdk)
    assert {name: limited.value.response.headers[name] for name in headers} == headers
    with pytest.raises(anthropic.OverloadedError) as overloaded:
        await ask(fake_model_sdk)
    assert "retry-after" not in overloaded.value.response.headers


async def test_m8_2_prompt_too_long_is_a_400_with_the_api_text(
    fake_model: FakeModelServer, fake_model_sdk: anthropic.AsyncAnthropic
) -> None:
    text = prompt_too_long_message(137500, 135000)
    assert text == "prompt is too long: 137500 tokens > 135000 maximum"
    await fake_model.script(None, [HttpErrorStep(status=400, message=text)])
    with pytest.raises(anthropic.BadRequestError) as raised:
        await ask(fake_model_sdk)
    assert isinstance(raised.value.body, dict)
    assert raised.value.body["error"] == {"type": "invalid_request_error", "message": text}


async def test_m2_3_mid_stream_overloaded_error_raises_after_the_events_before_it(
    fake_model: FakeModelServer, fake_model_sdk: anthropic.AsyncAnthropic
) -> None:
    await fake_model.script(None, [STORY.model_copy(update={"fail_after_events": 4, "fail_with": "overloaded_error"})])
    stream = await fake_model_sdk.messages.create(model=MODEL, max_tokens=100, messages=PROMPT, stream=True)
    seen: list[str] = []
    with pytest.raises(anthropic.APIStatusError) as raised:
        await read_into(seen, stream)
    assert seen == ["message_start", "content_block_start", "content_block_delta", "content_block_delta"]
    error = raised.value
    assert error.status_code == 200  # M2.3: built from the 200 stream response, not an OverloadedError
    assert not isinstance(error, anthropic.OverloadedError)
    assert isinstance(error.body, dict)
    assert error.body["error"] == {"type": "overloaded_error", "message": "Overloaded"}


async def test_m2_3_mid_stream_api_error_event(
    fake_model: FakeModelServer, fake_model_sdk: anthropic.AsyncAnthropic
) -> None:
    await fake_model.script(None, [STORY.model_copy(update={"fail_after_events": 0, "fail_with": "api_error"})])
    stream = await fake_model_sdk.messages.create(model=MODEL, max_tokens=100, messages=PROMPT, stream=True)
    with pytest.raises(anthropic.APIStatusError) as raised:
        await read_into([], stream)
    assert isinstance(raised.value.body, dict)
    assert raised.value.body["error"]["type"] == "api_error"


async def test_drop_cuts_the_connection_mid_stream(
    fake_model: FakeModelServer, fake_model_sdk: anthropic.AsyncAnthropic
) -> None:
    await fake_model.script(None, [STORY.model_copy(update={"fail_after_events": 3, "fail_with": "drop"})])
    stream = await fake_model_sdk.messages.create(model=MODEL, max_tokens=100, messages=PROMPT, stream=True)
    seen: list[str] = []
    with pytest.raises((httpx2.RemoteProtocolError, anthropic.APIConnectionError)) as raised:
        await read_into(seen, stream)
    assert seen == ["message_start", "content_block_start", "content_block_delta"]
    assert "incomplete chunked read" in str(raised.value)
    assert [r.ended for r in await fake_model.requests(settled=True)] == ["cut"]


async def test_m2_5_end_stops_the_stream_cleanly_before_message_stop(
    fake_model: FakeModelServer, fake_model_sdk: anthropic.AsyncAnthropic
) -> None:
    """``end``: the events before the cut, then a clean end of the body — the SDK raises nothing (M2.5 decides)."""
    deltas = -(-len(STORY.content[0]["text"]) // STORY.chunk_chars)  # type: ignore[operator]
    events = ["message_start", "content_block_start", *["content_block_delta"] * deltas, "content_block_stop"]
    cut = len(events) + 1  # … and the message_delta: everything but message_stop
    await fake_model.script(None, [STORY.model_copy(update={"fail_after_events": cut, "fail_with": "end"})])
    stream = await fake_model_sdk.messages.create(model=MODEL, max_tokens=100, messages=PROMPT, stream=True)
    seen: list[str] = []
    await read_into(seen, stream)
    assert seen == [*events, "message_delta"]
    assert [r.ended for r in await fake_model.requests(settled=True)] == ["answered"]
    await fake_model.script(None, [STORY.model_copy(update={"fail_after_events": 1, "fail_with": "end"})])
    assert (await ask(fake_model_sdk)).stop_reason == "end_turn"  # a whole reply has no stream to stop


async def test_drop_on_a_non_streaming_request_closes_without_an_answer(
    fake_model: FakeModelServer, fake_model_sdk: anthropic.AsyncAnthropic
) -> None:
    await fake_model.script(None, [STORY.model_copy(update={"fail_after_events": 0, "fail_with": "drop"})])
    with pytest.raises(anthropic.APIConnectionError):
        await ask(fake_model_sdk)


async def test_mid_stream_fault_on_a_non_streaming_request_is_the_status_error(
    fake_model: FakeModelServer, fake_model_sdk: anthropic.AsyncAnthropic
) -> None:
    await fake_model.script(None, [STORY.model_copy(update={"fail_after_events": 5, "fail_with": "overloaded_error"})])
    with pytest.raises(anthropic.OverloadedError):
        await ask(fake_model_sdk)


async def test_hang_ends_in_the_client_timeout_and_the_server_sees_the_client_leave(
    fake_model: FakeModelServer, fake_model_sdk: anthropic.AsyncAnthropic
) -> None:
    await fake_model.script(None, [HangStep(seconds=600)])
    with pytest.raises(anthropic.APITimeoutError):
        await fake_model_sdk.messages.create(model=MODEL, max_tokens=100, messages=PROMPT, timeout=0.2)
    answer = await ask(fake_model_sdk)  # the hung request holds nothing up
    assert answer.content[0].type == "text"
    recorded = await fake_model.requests(settled=True)
    assert [(r.step_kind, r.ended) for r in recorded] == [("hang", "client_left"), ("echo", "answered")]


async def test_hang_that_runs_out_closes_the_connection_unanswered(
    fake_model: FakeModelServer, fake_model_sdk: anthropic.AsyncAnthropic
) -> None:
    await fake_model.script(None, [HangStep(seconds=0.01)])
    with pytest.raises(anthropic.APIConnectionError) as raised:
        await ask(fake_model_sdk)
    assert not isinstance(raised.value, anthropic.APITimeoutError)
    assert [r.ended for r in await fake_model.requests(settled=True)] == ["cut"]


async def test_slow_stream_does_not_hold_up_other_requests(
    fake_model: FakeModelServer, fake_model_sdk: anthropic.AsyncAnthropic
) -> None:
    await fake_model.script("slow", [STORY.model_copy(update={"chunk_delay_ms": 600_000})])
    metadata: anthropic.types.MetadataParam = {"user_id": orjson.dumps({"session_id": "slow"}).decode()}
    stream = await fake_model_sdk.messages.create(
        model=MODEL, max_tokens=100, messages=PROMPT, stream=True, metadata=metadata
    )
    events = stream.__aiter__()
    assert (await anext(events)).type == "message_start"
    next_event = asyncio.ensure_future(anext(events))
    for _ in range(3):  # other requests are answered while the slow stream waits for its next event
        answer = await ask(fake_model_sdk)
        assert answer.content[0].type == "text"
    assert not next_event.done()
    next_event.cancel()
    await stream.close()
    slow = await fake_model.requests("slow", settled=True)
    assert [r.ended for r in slow] == ["client_left"]  # what an interrupt looks like from the model's side
    assert slow[0].ended_at_ms is not None


async def test_first_chunk_delay_holds_back_message_start(
    fake_model: FakeModelServer, fake_model_sdk: anthropic.AsyncAnthropic
) -> None:
    await fake_model.script(None, [STORY.model_copy(update={"first_chunk_delay_ms": 600_000})])
    stream = await fake_model_sdk.messages.create(
        model=MODEL, max_tokens=100, messages=PROMPT, stream=True, timeout=0.3
    )
    assert stream.response.status_code == 200  # headers come at once, the first event does not
    with pytest.raises(httpx2.ReadTimeout):
        await read_into([], stream)


async def test_stopping_the_server_cuts_a_hanging_request() -> None:
    server = FakeModelServer.start()
    fake = await server.__aenter__()
    await fake.script(None, [HangStep(seconds=600)])
    async with anthropic.AsyncAnthropic(base_url=fake.base_url, api_key="test", max_retries=0) as sdk:
        pending = asyncio.ensure_future(ask(sdk))
        while not await fake.requests():
            await asyncio.sleep(0.01)
        await server.__aexit__(None, None, None)
        with pytest.raises(anthropic.APIConnectionError):
            await pending


def post(base_url: str, body: object, headers: dict[str, str]) -> tuple[int, dict[str, object]]:
    """POST to the Messages API without the SDK (it always sends a key); the status and the JSON body."""
    request = urllib.request.Request(base_url + "/v1/messages", data=orjson.dumps(body), headers=headers, method="POST")
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    try:
        with opener.open(request) as response:
            return response.status, orjson.loads(response.read())
    except urllib.error.HTTPError as error:
        with error:
            return error.code, {**orjson.loads(error.read()), "request-id header": error.headers["request-id"]}


def test_request_without_api_key_gets_401_and_takes_no_step(fake_model: FakeModelServer) -> None:
    fake_model.admin.script(None, [STORY])
    status, body = post(fake_model.base_url, {"model": MODEL, "max_tokens": 5, "messages": PROMPT}, {})
    assert status == 401
    assert body["request-id header"] == body["request_id"]
    assert body["error"] == {"type": "authentication_error", "message": "x-api-key header is required"}
    status, _ = post(
        fake_model.base_url, {"model": MODEL, "max_tokens": 5, "messages": PROMPT}, {"authorization": "Bearer oauth"}
    )
    assert status == 200
    assert [r.step_kind for r in fake_model.admin.requests()] == ["unauthenticated", "reply"]


ORPHAN_USE = [
    {"role": "user", "content": "go"},
    {"role": "assistant", "content": [{"type": "tool_use", "id": "toolu_1", "name": "Read", "input": {}}]},
    {"role": "user", "content": "and?"},
]
ORPHAN_RESULT = [{"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_9", "content": "x"}]}]


@pytest.mark.parametrize(
    ("messages", "text"),
    [
        ([], "messages: at least one message is required"),
        (
            [{"role": "assistant", "content": "hi"}, {"role": "user", "content": "x"}],
            'messages: first message must use the "user" role',
        ),
        (
            ORPHAN_USE,
            "messages.1: `tool_use` ids were found without `tool_result` blocks immediately after: toolu_1. "
            "Each `tool_use` block must have a corresponding `tool_result` block in the next message.",
        ),
        (
            ORPHAN_RESULT,
            "messages.0.content.0: unexpected `tool_use_id` found in `tool_result` blocks: toolu_9. "
            "Each `tool_result` block must have a corresponding `tool_use` block in the previous message.",
        ),
    ],
    ids=["empty", "assistant-first", "orphan-tool-use", "orphan-tool-result"],
)
def test_request_body_problems_get_the_api_400_text(fake_model: FakeModelServer, messages: object, text: str) -> None:
    status, body = post(
        fake_model.base_url, {"model": MODEL, "max_tokens": 5, "messages": messages}, {"x-api-key": "k"}
    )
    assert (status, body["error"]) == (400, {"type": "invalid_request_error", "message": text})
    assert [r.step_kind for r in fake_model.admin.requests()] == ["invalid_request"]


def test_m1_9_body_over_32_mb_gets_413_request_too_large(fake_model: FakeModelServer) -> None:
    request = urllib.request.Request(
        fake_model.base_url + "/v1/messages", data=b" " * (32 * 1024 * 1024 + 1), headers={"x-api-key": "k"}
    )
    with pytest.raises(urllib.error.HTTPError) as raised:
        urllib.request.build_opener(urllib.request.ProxyHandler({})).open(request)
    with raised.value as error:
        assert error.code == 413
        assert orjson.loads(error.read())["error"]["type"] == "request_too_large"
    assert [(r.step_kind, r.body) for r in fake_model.admin.requests()] == [("request_too_large", None)]
