"""What the fake model server does with one request: a scripted *step* (CONTRACTS.md "The fake
Anthropic-compatible server").

Steps are queued per session and taken one per ``POST /v1/messages``. Three kinds, discriminated by
``kind``: a streamed (or whole) ``reply``, possibly failing part-way (M2.3 mid-stream ``error`` event, or
a cut connection); an ``http_error`` with the API's status, ``error.type`` and headers (M3.1, M3.2); a
``hang`` that accepts the request and sends nothing (client timeouts, interrupts).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Annotated, Final, Literal

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, field_validator

from agentbus_redis.json_types import JsonObject, JsonValue

ECHO_MARKER: Final = "{{echo}}"
"""A ``text`` block of a reply whose text contains this gets the request's last user text in its place."""

ERROR_TYPE_BY_STATUS: Final[dict[int, str]] = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    413: "request_too_large",
    429: "rate_limit_error",
    500: "api_error",
    529: "overloaded_error",
}
"""M3.1: the ``error.type`` the API sends with each status (other 4xx → invalid_request_error, other 5xx →
api_error)."""

DEFAULT_ERROR_MESSAGES: Final[dict[str, str]] = {
    "invalid_request_error": "Invalid request",
    "authentication_error": "invalid x-api-key",
    "permission_error": "Your API key does not have permission to use the specified resource.",
    "not_found_error": "Not found",
    "request_too_large": "Request exceeds the maximum allowed number of bytes.",
    "rate_limit_error": "This request would exceed the rate limit for your organization. Please try again later.",
    "api_error": "Internal server error",
    "overloaded_error": "Overloaded",
}

FailWith = Literal["overloaded_error", "api_error", "drop", "end"]
Ending = Literal["answered", "client_left", "cut", "server_stopped"]

_REQUIRED_BLOCK_FIELDS: Final[dict[str, tuple[str, ...]]] = {
    "text": ("text",),
    "tool_use": ("name", "input"),
    "thinking": ("thinking",),
    "redacted_thinking": ("data",),
}


def error_type_for(status: int) -> str:
    """M3.1's ``error.type`` for ``status``; unknown statuses by class."""
    return ERROR_TYPE_BY_STATUS.get(status, "api_error" if status >= 500 else "invalid_request_error")


def prompt_too_long_message(actual_tokens: int, limit_tokens: int) -> str:
    """The API's prompt-too-long text (M8.2), e.g. ``prompt is too long: 137500 tokens > 135000 maximum``."""
    return f"prompt is too long: {actual_tokens} tokens > {limit_tokens} maximum"


class _Step(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class ReplyStep(_Step):
    """A Message: streamed as real SSE events when the request streams, else returned whole.

    ``content`` holds API content blocks. A ``tool_use`` without ``id`` gets a fresh ``toolu_…`` id, a
    ``thinking`` block without ``signature`` a made-up one. Text, thinking and tool input are split into
    deltas of ``chunk_chars`` characters (M2.2). ``stop_reason`` None = ``tool_use`` when the content has a
    tool call, else ``end_turn``. ``usage`` overrides fields of the estimated final usage (sent, cumulative,
    in ``message_delta``; its input and cache fields also in ``message_start``); ``delta_usage`` replaces
    the ``message_delta`` usage verbatim (M2.6 merge tests).

    Faults: ``fail_after_events`` = send that many events (pings not counted), then an SSE ``error`` event
    of ``fail_with`` — or, for ``drop``, cut the connection without the terminating chunk; for ``end``, end the
    response cleanly there (the terminating chunk, no error: a stream that simply stops, e.g. before its
    ``message_stop``, M2.5). A non-streaming request meets the same fault as a whole: 529 / 500 error
    response, or a connection closed unanswered (``end``: the whole Message, the fault is the stream's only).
    """

    kind: Literal["reply"] = "reply"
    content: list[JsonObject] = Field(default_factory=list)
    stop_reason: str | None = None
    stop_sequence: str | None = None
    usage: JsonObject | None = None
    delta_usage: JsonObject | None = None
    model: str | None = None
    headers: dict[str, str] = Field(default_factory=dict)
    first_chunk_delay_ms: float = Field(default=0, ge=0)
    chunk_delay_ms: float = Field(default=0, ge=0)
    chunk_chars: int = Field(default=16, ge=1)
    fail_after_events: int | None = Field(default=None, ge=0)
    fail_with: FailWith = "overloaded_error"

    @field_validator("content")
    @classmethod
    def _blocks_are_api_blocks(cls, content: list[JsonObject]) -> list[JsonObject]:
        for index, block in enumerate(content):
            kind = block.get("type")
            if not isinstance(kind, str):
                raise ValueError(f"content.{index}: a content block needs a string `type`")
            missing = [name for name in _REQUIRED_BLOCK_FIELDS.get(kind, ()) if name not in block]
            if missing:
                raise ValueError(f"content.{index}: a `{kind}` block needs {', '.join(missing)}")
            if kind == "tool_use" and not isinstance(block["input"], Mapping):
                raise ValueError(f"content.{index}: `tool_use.input` must be an object")
        return content

    def resolved_stop_reason(self) -> str:
        if self.stop_reason is not None:
            return self.stop_reason
        return "tool_use" if any(block.get("type") == "tool_use" for block in self.content) else "end_turn"


class HttpErrorStep(_Step):
    """An error response (M3.1): ``{"type":"error","error":{"type","message"},"request_id"}`` with
    ``status``; ``error_type`` and ``message`` default by status; ``headers`` e.g. ``retry-after``,
    ``retry-after-ms``, ``x-should-retry`` (M3.2, M3.3)."""

    kind: Literal["http_error"] = "http_error"
    status: int = Field(ge=400, le=599)
    error_type: str | None = None
    message: str | None = None
    headers: dict[str, str] = Field(default_factory=dict)

    def resolved_error_type(self) -> str:
        return self.error_type or error_type_for(self.status)

    def resolved_message(self) -> str:
        if self.message is not None:
            return self.message
        return DEFAULT_ERROR_MESSAGES.get(self.resolved_error_type(), "Error")


class HangStep(_Step):
    """Accept the request and send nothing; after ``seconds`` close the connection unanswered (a client
    timeout or interrupt normally ends it first)."""

    kind: Literal["hang"] = "hang"
    seconds: float = Field(default=3600.0, gt=0)


Step = Annotated[ReplyStep | HttpErrorStep | HangStep, Field(discriminator="kind")]
STEP_ADAPTER: Final[TypeAdapter[ReplyStep | HttpErrorStep | HangStep]] = TypeAdapter(Step)


class ScriptRequest(BaseModel):
    """Body of ``POST /_fake/script``: steps appended to a session's queue (None = the default queue)."""

    model_config = ConfigDict(extra="forbid")

    session_id: str | None = None
    steps: list[Step]


class RecordedRequest(BaseModel):
    """One ``POST /v1/messages`` as received, in ``GET /_fake/requests``. ``step_kind``: the step that
    answered it (``reply``, ``http_error``, ``hang``), the fallback (``echo``, ``demo``), or why it was
    refused before any step (``request_too_large``, ``unauthenticated``, ``invalid_request``)."""

    at_ms: float
    session_id: str | None
    headers: dict[str, str]
    body: JsonValue
    """The JSON body; the raw text when it was not JSON; None when it was too large to keep."""
    step_kind: str
    ended: Ending | None = None
    """How the exchange ended (None: still going): ``answered`` (the whole response was sent),
    ``client_left`` (the client closed the connection first: a timeout, an interrupt), ``cut`` (a ``drop``,
    or a ``hang`` that ran out), ``server_stopped``."""
    ended_at_ms: float | None = None
