"""The fake model server's ASGI app: ``POST /v1/messages`` (the Messages API) and the ``/_fake/*``
admin endpoints (CONTRACTS.md "The fake Anthropic-compatible server").

A request is checked the way the API checks it (401 without a key, 400 with the API's own text for the
request-body problems that matter to the bus, anthropic-api-rules.md §1), then answered by the next step
of its session's queue, else of the default queue, else the server's fallback script. Faults are real:
``drop`` closes the TCP connection mid-body (no terminating chunk), ``hang`` holds it open without a
byte, delays are awaited without blocking other requests. Every wait also ends when the client goes away
or the server stops.

Everything runs on the server's event loop, so the state needs no locks.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections import deque
from collections.abc import Awaitable, Callable, Iterable
from dataclasses import dataclass, field
from typing import Final, cast

import orjson
from pydantic import ValidationError
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route
from starlette.types import ASGIApp, Receive, Scope, Send

from services.model.fake_scripts import FallbackScript, fallback_step, session_of, with_echo
from services.model.fake_sse import (
    PING,
    api_id,
    completed_content,
    error_body,
    final_usage,
    sse_frame,
    stream_events,
    whole_message,
)
from services.model.fake_steps import (
    DEFAULT_ERROR_MESSAGES,
    Ending,
    HangStep,
    HttpErrorStep,
    RecordedRequest,
    ReplyStep,
    ScriptRequest,
)
from shared.api_types import MessagesRequest
from shared.api_validation import validate_api_request
from shared.json_types import JsonObject, JsonValue

CLOSE_CONNECTION: Final = "agentbus.fake.close_connection"
"""Scope key of a callable that closes the request's TCP connection (set by :func:`fake_model_app`)."""

ENFORCED_RULES: Final = frozenset(
    {
        "empty_messages",
        "invalid_messages",
        "invalid_message",
        "invalid_role",
        "invalid_content",
        "invalid_block",
        "missing_field",
        "first_message_not_user",
        "empty_content",
        "empty_text",
        "whitespace_text",
        "tool_use_without_result",
        "orphan_tool_result",
        "duplicate_tool_result",
        "tool_result_not_first",
        "duplicate_tool_use_id",
    }
)
"""The rules of shared/api_validation.py the fake rejects with 400. Left out: role alternation (the API
merges same-role runs), prefill and thinking rules (they depend on the model and on real signatures)."""

DEFAULT_KEEP_REQUESTS: Final = 10_000
MAX_REQUEST_BYTES: Final = 32 * 1024 * 1024
"""M1.9: the Messages API's request size limit (413 ``request_too_large`` from the edge)."""

FAULT_STATUS: Final = {"overloaded_error": 529, "api_error": 500}
"""A reply's mid-stream fault met by a non-streaming request: the same error as a status (M2.3)."""


@dataclass
class FakeModelState:
    """Step queues per session (None = the default queue) and the requests received, the latest
    ``keep_requests`` of them (each holds its whole conversation, so a long demo would otherwise grow
    without bound)."""

    script: FallbackScript
    keep_requests: int = DEFAULT_KEEP_REQUESTS
    queues: dict[str | None, deque[ReplyStep | HttpErrorStep | HangStep]] = field(default_factory=dict)
    received: deque[RecordedRequest] = field(init=False)
    stopping: asyncio.Event = field(default_factory=asyncio.Event)

    def __post_init__(self) -> None:
        self.received = deque(maxlen=self.keep_requests)
        self._an_exchange_ended = asyncio.Event()

    def end(self, record: RecordedRequest, ending: Ending) -> None:
        """Note how ``record``'s exchange ended and wake those waiting for requests to settle."""
        record.ended = ending
        record.ended_at_ms = time.time() * 1000
        self._an_exchange_ended.set()
        self._an_exchange_ended = asyncio.Event()

    async def settled(self, chosen: Callable[[], list[RecordedRequest]], timeout_s: float) -> list[RecordedRequest]:
        """``chosen()`` once none of its requests is still going, or as it is after ``timeout_s``."""
        deadline = asyncio.get_running_loop().time() + timeout_s
        records = chosen()
        while any(r.ended is None for r in records):
            remaining = deadline - asyncio.get_running_loop().time()
            if remaining <= 0:
                break
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._an_exchange_ended.wait(), remaining)
            records = chosen()
        return records

    def next_step(self, session: str | None) -> ReplyStep | HttpErrorStep | HangStep | None:
        for queue_key in (session, None) if session is not None else (None,):
            queue = self.queues.get(queue_key)
            if queue:
                return queue.popleft()
        return None


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
        if self.step.fail_after_events is not None:
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
        if failing:
            fault = error_body(step.fail_with, DEFAULT_ERROR_MESSAGES[step.fail_with], self.request_id)
            await send({"type": "http.response.body", "body": sse_frame(fault), "more_body": True})
        await send({"type": "http.response.body", "body": b"", "more_body": False})
        exchange.completed = True


async def _send_whole(send: Send, status: int, headers: Iterable[tuple[bytes, bytes]], body: bytes) -> None:
    all_headers = [*headers, (b"content-type", b"application/json"), (b"content-length", str(len(body)).encode())]
    await send({"type": "http.response.start", "status": status, "headers": all_headers})
    await send({"type": "http.response.body", "body": body, "more_body": False})


def api_error_response(
    status: int, error_type: str, message: str, *, request_id: str, headers: dict[str, str] | None = None
) -> JSONResponse:
    """An error as the API sends it (M3.1), with its ``request-id`` header."""
    return JSONResponse(
        error_body(error_type, message, request_id),
        status_code=status,
        headers={"request-id": request_id, **(headers or {})},
    )


def _request_headers(request: Request) -> dict[str, str]:
    headers: dict[str, str] = {}
    for key, value in request.headers.items():
        headers[key] = f"{headers[key]}, {value}" if key in headers else value
    return headers


def _authenticated(headers: dict[str, str]) -> bool:
    """A key of any value, never checked further: ``x-api-key``, or ``authorization: Bearer …`` (how the
    SDK 2.13 sends an API key, and how OAuth tokens come)."""
    return bool(headers.get("x-api-key") or headers.get("authorization", "").lower().startswith("bearer "))


def _body_problem(body: JsonValue) -> str | None:
    """The API's 400 text for the first request-body problem the fake checks, None when acceptable."""
    if not isinstance(body, dict):
        return "There was an error parsing the body of your request"
    if not isinstance(body.get("model"), str):
        return "model: Field required"
    if not isinstance(body.get("max_tokens"), int):
        return "max_tokens: Field required"
    request = cast(MessagesRequest, body)  # read defensively by the validator, whatever its shape
    violations = [v for v in validate_api_request(request, allow_prefill=True) if v.rule in ENFORCED_RULES]
    return violations[0].detail if violations else None


class FakeModelEndpoints:
    """The routes, bound to one :class:`FakeModelState`."""

    def __init__(self, state: FakeModelState) -> None:
        self.state = state

    async def messages(self, request: Request) -> Response:
        request_id = api_id("req")
        headers = _request_headers(request)
        raw = await request.body()
        if len(raw) > MAX_REQUEST_BYTES:
            self.state.end(self._record(None, headers, None, "request_too_large"), "answered")
            too_large = DEFAULT_ERROR_MESSAGES["request_too_large"]
            return api_error_response(413, "request_too_large", too_large, request_id=request_id)
        try:
            body: JsonValue = orjson.loads(raw)
        except orjson.JSONDecodeError:
            body = raw.decode("utf-8", "replace")
        session = session_of(body) if isinstance(body, dict) else None
        if not _authenticated(headers):
            self.state.end(self._record(session, headers, body, "unauthenticated"), "answered")
            return api_error_response(
                401, "authentication_error", "x-api-key header is required", request_id=request_id
            )
        problem = _body_problem(body)
        if problem is not None or not isinstance(body, dict):
            self.state.end(self._record(session, headers, body, "invalid_request"), "answered")
            return api_error_response(400, "invalid_request_error", str(problem), request_id=request_id)
        step = self.state.next_step(session)
        record = self._record(session, headers, body, step.kind if step is not None else self.state.script)
        if step is None:
            step = fallback_step(self.state.script, body)
        if isinstance(step, HttpErrorStep):
            self.state.end(record, "answered")
            return api_error_response(
                step.status,
                step.resolved_error_type(),
                step.resolved_message(),
                request_id=request_id,
                headers=step.headers,
            )
        if isinstance(step, HangStep):
            return HangResponse(self.state, record, step.seconds)
        return self._reply(record, with_echo(step, body), body, request_id)

    def _record(self, session: str | None, headers: dict[str, str], body: JsonValue, step_kind: str) -> RecordedRequest:
        # Built from parsed JSON, so valid by construction; validating a long conversation costs ~0.2 ms.
        record = RecordedRequest.model_construct(
            at_ms=time.time() * 1000, session_id=session, headers=headers, body=body, step_kind=step_kind
        )
        self.state.received.append(record)
        return record

    def _reply(self, record: RecordedRequest, step: ReplyStep, body: JsonObject, request_id: str) -> Response:
        content = completed_content(step)
        message = whole_message(
            step,
            message_id=api_id("msg"),
            model=step.model or str(body["model"]),
            content=content,
            usage=final_usage(step, body, content),
        )
        if body.get("stream") is True:
            return StreamedReplyResponse(self.state, record, step, message, request_id)
        return WholeReplyResponse(self.state, record, step, message, request_id)

    async def script(self, request: Request) -> Response:
        try:
            script = ScriptRequest.model_validate_json(await request.body())
        except ValidationError as error:
            return JSONResponse({"error": orjson.loads(error.json(include_url=False))}, status_code=400)
        queue = self.state.queues.setdefault(script.session_id, deque())
        queue.extend(script.steps)
        return JSONResponse({"session_id": script.session_id, "queued": len(queue)})

    async def reset(self, request: Request) -> Response:
        self.state.queues.clear()
        self.state.received.clear()
        return JSONResponse({})

    async def requests(self, request: Request) -> Response:
        """``?session_id=`` selects one session; ``?settled_within_s=`` waits (that long at most) until
        none of the selected requests is still being answered."""
        session = request.query_params.get("session_id")

        def chosen() -> list[RecordedRequest]:
            return [r for r in self.state.received if session is None or r.session_id == session]

        wait_s = float(request.query_params.get("settled_within_s", 0))
        records = await self.state.settled(chosen, wait_s) if wait_s > 0 else chosen()
        return Response(orjson.dumps([r.model_dump(mode="json") for r in records]), media_type="application/json")

    async def health(self, request: Request) -> Response:
        """``/_fake/health``, and ``/healthz`` / ``/readyz`` for ``agentbus up``'s supervisor: serving."""
        return JSONResponse({"status": "ok", "script": self.state.script})


def _transport_closer(send: Send) -> Callable[[], None]:
    """Closes the connection ``send`` writes to. ASGI has no "abort" message, so this reaches the
    server's transport: uvicorn's ``send`` is a method of its request cycle, which holds it."""
    transport = getattr(getattr(send, "__self__", None), "transport", None)
    if transport is None:
        raise RuntimeError("the fake model server needs uvicorn's h11 protocol (its send exposes the transport)")
    return transport.close  # type: ignore[no-any-return]


def fake_model_app(state: FakeModelState) -> ASGIApp:
    """The ASGI app serving ``state``."""
    endpoints = FakeModelEndpoints(state)
    routes = [
        Route("/v1/messages", endpoints.messages, methods=["POST"]),
        Route("/_fake/script", endpoints.script, methods=["POST"]),
        Route("/_fake/reset", endpoints.reset, methods=["POST"]),
        Route("/_fake/requests", endpoints.requests, methods=["GET"]),
        Route("/_fake/health", endpoints.health, methods=["GET"]),
        Route("/healthz", endpoints.health, methods=["GET"]),
        Route("/readyz", endpoints.health, methods=["GET"]),
    ]
    inner = Starlette(routes=routes)

    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            scope[CLOSE_CONNECTION] = _transport_closer(send)
        await inner(scope, receive, send)

    return app
