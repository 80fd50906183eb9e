"""What went wrong in an attempt, from the ``anthropic`` SDK's exceptions to :class:`ApiFailure` (M3.4, M4.12).

Classes are not trusted (their names changed between SDK versions, M3.4): the status code, the parsed body
and the response headers are. A stream's ``error`` event arrives as an ``APIStatusError`` of the 200 stream
response whose body is the event (M2.3); its ``error.type`` is read from the body. A transport error raised
while a stream is read (the HTTP library's errors: a dropped connection) is a connection failure.
"""

from __future__ import annotations

from collections.abc import Mapping

import anthropic

from agentbus_redis.json_types import JsonValue
from agentbus_redis.model.genai import error_type
from agentbus_redis.model.retry import ApiFailure


def _error_of(body: object) -> tuple[str | None, str]:
    """(error.type, error.message) of an API error body ``{"type":"error","error":{…}}``."""
    if isinstance(body, Mapping):
        inner = body.get("error")
        if isinstance(inner, Mapping):
            kind, message = inner.get("type"), inner.get("message")
            return (kind if isinstance(kind, str) else None, message if isinstance(message, str) else "")
    return None, ""


def _headers(response: object) -> dict[str, str]:
    headers = getattr(response, "headers", None)
    if headers is None:
        return {}
    return {str(name).lower(): str(value) for name, value in headers.items()}


def failure_of(error: BaseException) -> ApiFailure:
    """The :class:`ApiFailure` of an exception raised by a call or while its stream was read."""
    if isinstance(error, anthropic.APIStatusError):
        body: JsonValue = error.body if isinstance(error.body, dict | list | str | int | float | bool) else None
        kind, message = _error_of(body)
        return ApiFailure(
            status=error.status_code,
            error_type=kind,
            message=message or str(error),
            body=body,
            headers=_headers(error.response),
        )
    if isinstance(error, anthropic.APITimeoutError | TimeoutError) or _is_transport(error, "Timeout"):
        return ApiFailure(status=None, message="Request timed out.", connection=True, timeout=True)
    if isinstance(error, anthropic.APIConnectionError | OSError) or _is_transport(error, "Error"):
        return ApiFailure(status=None, message="Connection error.", connection=True)
    return ApiFailure(status=None, message=f"{type(error).__name__}: {error}")


def _is_transport(error: BaseException, kind: str) -> bool:
    """An error of the SDK's HTTP library (``httpx``, or the ``httpx2`` fork some SDK builds use), e.g. the
    ``RemoteProtocolError`` of a connection dropped mid-stream, without importing it."""
    module = type(error).__module__
    return module.split(".")[0] in ("httpx", "httpx2", "httpcore", "httpcore2") and kind in type(error).__name__


def error_type_label(failure: ApiFailure) -> str:
    """The bounded ``error.type`` of a failure (M11.2, ``model/genai.py``)."""
    return error_type(
        status_code=failure.status if failure.status != 200 else None,
        api_error_type=failure.error_type,
        timeout=failure.timeout,
        connection=failure.connection,
    )
