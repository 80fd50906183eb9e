"""The fake model server's ASGI app: ``POST /v1/messages`` (the Messages API) and the ``/_fake/*``
admin endpoints (CONTRACTS.md "The fake Anthropic-compatible server").

A request is checked the way the API checks it (401 without a key, 400 with the API's own text for the
request-body problems that matter to the bus, anthropic-api-rules.md §1), then answered by the next step
of its session's queue, else of the default queue, else the server's fallback script. Faults are real:
``drop`` closes the TCP connection mid-body (no terminating chunk), ``hang`` holds it open without a
byte, delays are awaited without blocking other requests. Every wait also ends when the client goes away
or the server stops.

Everything runs on the server's event loop, so the state (:mod:`agentbus_redis.workers.model.fake_state`) needs no
locks; the responses that drive their connection are in :mod:`agentbus_redis.workers.model.fake_exchange`.
"""

from __future__ import annotations

import time
from collections import deque
from typing import Final, cast

import orjson
from pydantic import ValidationError
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route
from starlette.types import ASGIApp, Receive, Scope, Send

from agentbus_redis.api.types import MessagesRequest
from agentbus_redis.api.validation import validate_api_request
from agentbus_redis.json_types import JsonObject, JsonValue
from agentbus_redis.workers.model.fake_exchange import (
    CLOSE_CONNECTION,
    HangResponse,
    StreamedReplyResponse,
    WholeReplyResponse,
    transport_closer,
)
from agentbus_redis.workers.model.fake_scripts import fallback_step, session_of, with_echo
from agentbus_redis.workers.model.fake_sse import api_id, completed_content, error_body, final_usage, whole_message
from agentbus_redis.workers.model.fake_state import FakeModelState
from agentbus_redis.workers.model.fake_steps import (
    DEFAULT_ERROR_MESSAGES,
    HangStep,
    HttpErrorStep,
    RecordedRequest,
    ReplyStep,
    ScriptRequest,
)

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
"""The rules of api/validation.py the fake rejects with 400. Left out: role alternation (the API
merges same-role runs), prefill and thinking rules (they depend on the model and on real signatures)."""

MAX_REQUEST_BYTES: Final = 32 * 1024 * 1024
"""M1.9: the Messages API's request size limit (413 ``request_too_large`` from the edge)."""


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
            scope[CLOSE_CONNECTION] = transport_closer(send)
        await inner(scope, receive, send)

    return app
