"""Responses that drive their connection themselves: SSE streams with delays and mid-stream faults,
whole replies after a delay, hangs — and the faults no ASGI message expresses (closing the TCP connection
mid-body or unanswered). Each wait ends early when the client leaves or the server stops, and the request's
record notes how the exchange ended.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Iterable
from typing import Final

import orjson
from starlette.responses import Response
from starlette.types import Receive, Scope, Send

from agentbus_redis.json_types import JsonObject
from agentbus_redis.workers.model.fake_sse import PING, error_body, sse_frame, stream_events
from agentbus_redis.workers.model.fake_state import FakeModelState
from agentbus_redis.workers.model.fake_steps import DEFAULT_ERROR_MESSAGES, Ending, RecordedRequest, ReplyStep

CLOSE_CONNECTION: Final = "agentbus.fake.close_connection"
"""Scope key of a callable that closes the request's TCP connection (:func:`transport_closer`)."""

FAULT_STATUS: Final = {"overloaded_error": 529, "api_error": 500}
"""A reply's mid-stream fault met by a non-streaming request: the same error as a status (M2.3)."""


async def _first_of(*waits: Awaitable[object]) -> None:
    tasks = [asyncio.ensure_future(wait) for wait in waits]
    try:
        await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for task in tasks:
            task.cancel()


async def _until_disconnect(receive: Receive) -> None:
    while (await receive())["type"] != "http.disconnect":
        pass


class _Exchange:
    """The live connection of one request: its waits end early when the client leaves or the server stops."""

    def __init__(self, scope: Scope, receive: Receive, state: FakeModelState) -> None:
        self.close_connection: Callable[[], None] = scope[CLOSE_CONNECTION]
        self.state = state
        self.gone = asyncio.Event()
        self.completed = False
        """Set by the response once its last byte is sent."""
        self.client_left = False
        self._listener = asyncio.ensure_future(self._listen(receive))

    async def _listen(self, receive: Receive) -> None:
        await _until_disconnect(receive)
        self.gone.set()

    async def pause(self, seconds: float) -> bool:
        """Wait ``seconds``; False when the client left or the server is stopping first."""
        if seconds > 0:
            await _first_of(asyncio.sleep(seconds), self.gone.wait(), self.state.stopping.wait())
        return not (self.gone.is_set() or self.state.stopping.is_set())

    async def cut(self) -> None:
        """Close the TCP connection now, whatever was sent (no terminating chunk, no response)."""
        self.client_left = self.gone.is_set()
        self.close_connection()
        await self.gone.wait()

    def ending(self) -> Ending:
        if self.completed:
            return "answered"
        if self.state.stopping.is_set():
            return "server_stopped"
        return "client_left" if self.client_left else "cut"

    def done(self) -> None:
        self._listener.cancel()


class _ExchangeResponse(Response):
    """A response that drives the connection itself (streams, faults) instead of sending one body."""

    def __init__(self, state: FakeModelState, record: RecordedRequest, headers: dict[str, str]) -> None:
        super().__init__(headers=headers)
        self.state, self.record = state, record

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        exchange = _Exchange(scope, receive, self.state)
        try:
            await self.play(exchange, send)
        finally:
            exchange.done()
            self.state.end(self.record, exchange.ending())

    async def play(self, exchange: _Exchange, send: Send) -> None:
        raise NotImplementedError

    def passed_headers(self) -> list[tuple[bytes, bytes]]:
        """The headers given to the constructor (the body headers are the subclass's)."""
        return [(k, v) for k, v in self.raw_headers if k not in (b"content-length", b"content-type")]


class HangResponse(_ExchangeResponse):
    def __init__(self, state: FakeModelState, record: RecordedRequest, seconds: float) -> None:
        super().__init__(state, record, {})
        self.seconds = seconds

    async def play(self, exchange: _Exchange, send: Send) -> None:
        await exchange.pause(self.seconds)
        await exchange.cut()


class WholeReplyResponse(_ExchangeResponse):
    """``stream: false``: the Message after ``first_chunk_delay_ms``, or the fault as a whole."""

    def __init__(
        self, state: FakeModelState, record: RecordedRequest, step: ReplyStep, message: JsonObject, request_id: str
    ) -> None:
        super().__init__(state, record, {"request-id": request_id, **step.headers})
        self.step, self.message, self.request_id = step, message, request_id

    async def play(self, exchange: _Exchange, send: Send) -> None:
        if not await exchange.pause(self.step.first_chunk_delay_ms / 1000):
            await exchange.cut()
            return
        if self.step.fail_after_events is not None and self.step.fail_with == "drop":
            await exchange.cut()
            return
        if self.step.fail_after_events is not None and self.step.fail_with != "end":
            error_type = self.step.fail_with
            status, body = (
                FAULT_STATUS[error_type],
                error_body(error_type, DEFAULT_ERROR_MESSAGES[error_type], self.request_id),
            )
        else:
            status, body = 200, self.message
        await _send_whole(send, status, self.passed_headers(), orjson.dumps(body))
        exchange.completed = True


class StreamedReplyResponse(_ExchangeResponse):
    """``stream: true``: SSE events with the step's delays, a ``ping`` after ``message_start`` (M2.1), and
    the step's fault after ``fail_after_events`` events."""

    def __init__(
        self, state: FakeModelState, record: RecordedRequest, step: ReplyStep, message: JsonObject, request_id: str
    ) -> None:
        headers = {"request-id": request_id, "cache-control": "no-cache", **step.headers}
        super().__init__(state, record, headers)
        self.step, self.message, self.request_id = step, message, request_id

    async def play(self, exchange: _Exchange, send: Send) -> None:
        step = self.step
        events = stream_events(self.message, step)
        failing = step.fail_after_events is not None and step.fail_after_events < len(events)
        if failing:
            events = events[: step.fail_after_events]
        start_headers = [*self.passed_headers(), (b"content-type", b"text/event-stream; charset=utf-8")]
        await send({"type": "http.response.start", "status": 200, "headers": start_headers})
        for position, event in enumerate(events):
            delay = step.first_chunk_delay_ms if position == 0 else step.chunk_delay_ms
            if not await exchange.pause(delay / 1000):
                await exchange.cut()
                return
            frames = sse_frame(event) + (sse_frame(PING) if event["type"] == "message_start" else b"")
            await send({"type": "http.response.body", "body": frames, "more_body": True})
        if failing and step.fail_with == "drop":
            await exchange.cut()
            return
        if failing and step.fail_with != "end":
            fault = error_body(step.fail_with, DEFAULT_ERROR_MESSAGES[step.fail_with], self.request_id)
            await send({"type": "http.response.body", "body": sse_frame(fault), "more_body": True})
        await send({"type": "http.response.body", "body": b"", "more_body": False})
        exchange.completed = True


async def _send_whole(send: Send, status: int, headers: Iterable[tuple[bytes, bytes]], body: bytes) -> None:
    all_headers = [*headers, (b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    await send({"type": "http.response.start", "status": status, "headers": all_headers})
    await send({"type": "http.response.body", "body": body, "more_body": False})


def transport_closer(send: Send) -> Callable[[], None]:
    """Closes the connection ``send`` writes to. ASGI has no "abort" message, so this reaches the
    server's transport: uvicorn's ``send`` is a method of its request cycle, which holds it."""
    transport = getattr(getattr(send, "__self__", None), "transport", None)
    if transport is None:
        raise RuntimeError("the fake model server needs uvicorn's h11 protocol (its send exposes the transport)")
    return transport.close  # type: ignore[no-any-return]
