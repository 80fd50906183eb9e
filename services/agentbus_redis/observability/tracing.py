"""W3C Trace Context (``traceparent``) carried in every stream entry and continued by every worker.

A producer starts a trace (:func:`new_root`) and puts ``traceparent`` in the ingress envelope; each
worker, per entry, *continues* it: a child span id whose parent is the incoming span, bound to the log
context (``trace_id``, ``span_id``) and written into every entry it produces. So one prompt can be
followed ingestion → tools → normalization → transcripts by its ``trace_id`` in the logs, with or without
a tracing backend (ecosystem.md §4.6).

OpenTelemetry is optional (the ``otel`` extra). When ``opentelemetry-api`` is importable and a recording
tracer provider is installed (by ``opentelemetry-instrument`` or :func:`configure_tracing`), each
continued span is a real OTel span whose ids are the ones propagated; otherwise the ids come from
``secrets`` and nothing else changes.

Format (https://www.w3.org/TR/trace-context/ §3.2): ``{version}-{trace-id}-{parent-id}-{trace-flags}``,
lowercase hex; version ``ff`` is invalid; an all-zero trace-id or parent-id is invalid; version ``00`` is
exactly 55 characters; a higher version may append ``-``-separated fields, which are ignored.
"""

from __future__ import annotations

import importlib
import os
import re
import secrets
from collections.abc import Callable, Mapping
from contextvars import Token
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any, Final, NamedTuple

from structlog.contextvars import bind_contextvars, reset_contextvars

from agentbus_redis.errors import AgentbusError

SAMPLED: Final = 0x01
_ZERO_TRACE: Final = "0" * 32
_ZERO_SPAN: Final = "0" * 16
_TRACEPARENT = re.compile(r"([0-9a-f]{2})-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})")
_VERSION_00 = re.compile(r"00-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})")

AttributeValue = str | int | float | bool


class TraceparentError(AgentbusError, ValueError):
    """A ``traceparent`` value that is not valid W3C Trace Context; ``value`` is the offending text."""

    def __init__(self, value: str, reason: str) -> None:
        super().__init__(f"invalid traceparent {value[:80]!r}: {reason}")
        self.value = value
        self.reason = reason


class _RandomBytes:
    """Random bytes from ``secrets`` drawn 4 KiB at a time: one ``getrandom`` call per 512 span ids
    instead of one per id (ids are made per stream entry, on the hot path). Reset in a forked child so
    two processes never hand out the same ids."""

    __slots__ = ("_buffer", "_position")

    def __init__(self) -> None:
        self._buffer = b""
        self._position = 0

    def reset(self) -> None:
        self._buffer = b""
        self._position = 0

    def hex(self, size: int) -> str:
        position = self._position
        if position + size > len(self._buffer):
            self._buffer = secrets.token_bytes(4096)
            position = 0
        self._position = position + size
        return self._buffer[position : position + size].hex()


_random = _RandomBytes()
os.register_at_fork(after_in_child=_random.reset)


def new_trace_id() -> str:
    """32 random lowercase hex digits, never all zero."""
    while True:
        trace_id = _random.hex(16)
        if trace_id != _ZERO_TRACE:
            return trace_id


def new_span_id() -> str:
    """16 random lowercase hex digits, never all zero."""
    while True:
        span_id = _random.hex(8)
        if span_id != _ZERO_SPAN:
            return span_id


class TraceContext(NamedTuple):
    """One span's identity: its trace, its own id, the sampling flags and (when known) its parent's id.

    A ``NamedTuple`` because one is made per stream entry: it is several times cheaper to build than a
    frozen dataclass.
    """

    trace_id: str
    span_id: str
    flags: int = SAMPLED
    parent_span_id: str | None = None

    @property
    def sampled(self) -> bool:
        return bool(self.flags & SAMPLED)

    @property
    def traceparent(self) -> str:
        """This span as a version-00 ``traceparent`` (what downstream entries carry).

        Formatted without :func:`format_traceparent`'s check: the contexts of this module hold valid ids
        (parsed, or drawn by ``new_*_id``), and ingestion takes one per entry."""
        return f"00-{self.trace_id}-{self.span_id}-{self.flags:02x}"

    def child(self) -> TraceContext:
        """A new span in the same trace whose parent is this one."""
        return TraceContext(self.trace_id, new_span_id(), self.flags, parent_span_id=self.span_id)


def new_root(*, sampled: bool = True) -> TraceContext:
    """A new trace (a producer starting a turn)."""
    return TraceContext(new_trace_id(), new_span_id(), SAMPLED if sampled else 0)


def format_traceparent(trace_id: str, span_id: str, flags: int = SAMPLED) -> str:
    """``00-{trace_id}-{span_id}-{flags:02x}``; raises ``TraceparentError`` on ids that are not valid."""
    value = TraceContext(trace_id, span_id, flags).traceparent
    if not 0 <= flags <= 0xFF:
        raise TraceparentError(value, "trace-flags must be one byte")
    parse_traceparent(value)
    return value


def parse_traceparent(value: str) -> TraceContext:
    """Parse a ``traceparent`` header value; raises ``TraceparentError`` naming what is wrong."""
    match = _TRACEPARENT.match(value)
    if match is None:
        raise TraceparentError(value, "expected 2-32-16-2 lowercase hex fields separated by '-'")
    version, trace_id, span_id, flags = match.groups()
    if version == "ff":
        raise TraceparentError(value, "version ff is invalid")
    if version == "00" and len(value) != 55:
        raise TraceparentError(value, "version 00 must be exactly 55 characters")
    if len(value) > 55 and value[55] != "-":
        raise TraceparentError(value, "fields of a future version must follow a '-'")
    if trace_id == _ZERO_TRACE:
        raise TraceparentError(value, "trace-id is all zeros")
    if span_id == _ZERO_SPAN:
        raise TraceparentError(value, "parent-id is all zeros")
    return TraceContext(trace_id, span_id, int(flags, 16) & SAMPLED)


def trace_id_of(value: str | None) -> str | None:
    """The trace id of a ``traceparent`` for logging, or None when absent or invalid."""
    if value is None:
        return None
    try:
        return parse_traceparent(value).trace_id
    except TraceparentError:
        return None


def continue_trace(value: str | None, *, on_invalid: Callable[[TraceparentError], None] | None = None) -> TraceContext:
    """The span a worker opens for an entry carrying ``value``: a child of it, or a new root when the
    entry has none or an invalid one (W3C §3.2.2.x: an unparsable traceparent restarts the trace).
    ``on_invalid`` is told about invalid values (bad input is counted, not silently dropped)."""
    if value is None:
        return new_root()
    # Fast path: the version-00 form every agentbus producer writes.
    match = _VERSION_00.fullmatch(value)
    if match is not None:
        trace_id, span_id, flags = match.groups()
        if trace_id != _ZERO_TRACE and span_id != _ZERO_SPAN:
            return TraceContext(trace_id, new_span_id(), int(flags, 16) & SAMPLED, span_id)
    try:
        return parse_traceparent(value).child()
    except TraceparentError as error:
        if on_invalid is not None:
            on_invalid(error)
        return new_root()


# --------------------------------------------------------------------------------------- OpenTelemetry
def _load_otel() -> Any:
    """The ``opentelemetry.trace`` module, or None when the ``otel`` extra is not installed or disabled."""
    if os.environ.get("OTEL_SDK_DISABLED", "").strip().lower() == "true":
        return None
    try:
        return importlib.import_module("opentelemetry.trace")
    except ImportError:
        return None


_otel: Any = _load_otel()


def otel_available() -> bool:
    return _otel is not None


def configure_tracing(service_name: str) -> bool:
    """Install an OpenTelemetry SDK tracer provider when ``OTEL_TRACES_EXPORTER`` asks for one.

    ``console`` needs ``opentelemetry-sdk``; ``otlp`` also needs ``opentelemetry-exporter-otlp`` (a
    missing package raises ``ImportError`` naming it, rather than silently not tracing). ``none``/unset
    leaves the global provider alone, e.g. when run under ``opentelemetry-instrument``. Returns True when
    a provider was installed here.
    """
    exporter_name = os.environ.get("OTEL_TRACES_EXPORTER", "").strip().lower()
    if _otel is None or exporter_name in {"", "none"}:
        return False
    sdk_trace = importlib.import_module("opentelemetry.sdk.trace")
    export = importlib.import_module("opentelemetry.sdk.trace.export")
    resources = importlib.import_module("opentelemetry.sdk.resources")
    if exporter_name == "console":
        exporter = export.ConsoleSpanExporter()
    elif exporter_name == "otlp":
        try:
            otlp = importlib.import_module("opentelemetry.exporter.otlp.proto.http.trace_exporter")
        except ImportError as exc:
            msg = "OTEL_TRACES_EXPORTER=otlp needs the opentelemetry-exporter-otlp-proto-http package"
            raise ImportError(msg) from exc
        exporter = otlp.OTLPSpanExporter()
    else:
        msg = f"OTEL_TRACES_EXPORTER={exporter_name!r} is not supported (console, otlp or none)"
        raise ValueError(msg)
    attributes = {"service.name": os.environ.get("OTEL_SERVICE_NAME", service_name)}
    provider = sdk_trace.TracerProvider(resource=resources.Resource.create(attributes))
    provider.add_span_processor(export.BatchSpanProcessor(exporter))
    _otel.set_tracer_provider(provider)
    return True


def flush_tracing(timeout_ms: int = 10_000) -> bool:
    """Export the spans still waiting in the batch span processor's window (graceful shutdown).

    A worker stopped by SIGTERM ends by that signal (uvicorn re-raises it once the app shut down), so the
    SDK's ``atexit`` shutdown never runs and the spans of the last ``OTEL_BSP_SCHEDULE_DELAY`` were lost.
    The global provider is flushed whoever installed it (:func:`configure_tracing`, or
    ``opentelemetry-instrument``); a provider without ``force_flush`` (the API's no-op one) is left alone.
    Returns what the provider's flush returned (False when it timed out or there is none)."""
    if _otel is None:
        return False
    force_flush = getattr(_otel.get_tracer_provider(), "force_flush", None)
    return bool(force_flush(timeout_ms)) if callable(force_flush) else False


@dataclass(slots=True)
class Span:
    """A worker's span for one entry (or one batch): its ids, an optional OTel span, log binding.

    Use as a context manager to bind ``trace_id``/``span_id`` to the log context for the block (and end
    the OTel span, recording an exception that escapes it).
    """

    context: TraceContext
    otel_span: Any = None
    _tokens: Mapping[str, Token[Any]] | None = field(default=None, repr=False)

    @property
    def traceparent(self) -> str:
        return self.context.traceparent

    @property
    def trace_id(self) -> str:
        return self.context.trace_id

    def set_attribute(self, key: str, value: AttributeValue) -> None:
        if self.otel_span is not None:
            self.otel_span.set_attribute(key, value)

    def end(self, error: BaseException | None = None) -> None:
        if self.otel_span is None:
            return
        if error is not None:
            self.otel_span.record_exception(error)
            status = importlib.import_module("opentelemetry.trace.status")
            self.otel_span.set_status(status.Status(status.StatusCode.ERROR, repr(error)[:200]))
        self.otel_span.end()
        self.otel_span = None

    def __enter__(self) -> Span:
        self._tokens = bind_contextvars(trace_id=self.context.trace_id, span_id=self.context.span_id)
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, traceback: TracebackType | None
    ) -> None:
        if self._tokens is not None:
            reset_contextvars(**self._tokens)
            self._tokens = None
        self.end(exc)


class WorkerTracer:
    """Continues traces for one worker type; ``on_invalid`` counts unparsable traceparents."""

    def __init__(self, worker: str, *, on_invalid: Callable[[TraceparentError], None] | None = None) -> None:
        self.worker = worker
        self.on_invalid = on_invalid
        self._tracer: Any = _otel.get_tracer("agentbus", attributes={"agentbus.worker": worker}) if _otel else None

    def start(
        self,
        name: str,
        traceparent: str | None,
        *,
        attributes: Mapping[str, AttributeValue] | None = None,
        kind: str = "CONSUMER",
    ) -> Span:
        """The span continuing ``traceparent`` (a root when None or invalid), as an OTel span when one
        is being recorded."""
        context = continue_trace(traceparent, on_invalid=self.on_invalid)
        if self._tracer is None:
            return Span(context)
        return self._start_otel(name, context, traceparent is not None, attributes, kind)

    def start_root(self, name: str, *, attributes: Mapping[str, AttributeValue] | None = None) -> Span:
        """A new trace (a producer: SDK, CLI, the deadline sweeper)."""
        context = new_root()
        if self._tracer is None:
            return Span(context)
        return self._start_otel(name, context, False, attributes, "PRODUCER")

    def _start_otel(
        self,
        name: str,
        context: TraceContext,
        has_parent: bool,
        attributes: Mapping[str, AttributeValue] | None,
        kind: str,
    ) -> Span:
        # A root must not pick up whatever span is current in this task: start from an empty context.
        parent_context = importlib.import_module("opentelemetry.context").Context()
        if has_parent and context.parent_span_id is not None:
            remote = _otel.SpanContext(
                trace_id=int(context.trace_id, 16),
                span_id=int(context.parent_span_id, 16),
                is_remote=True,
                trace_flags=_otel.TraceFlags(context.flags),
            )
            parent_context = _otel.set_span_in_context(_otel.NonRecordingSpan(remote))
        span = self._tracer.start_span(
            name,
            context=parent_context,
            kind=getattr(_otel.SpanKind, kind),
            attributes={"agentbus.worker": self.worker, **(attributes or {})},
        )
        if not span.is_recording():
            # No SDK (API only) or not sampled: keep our ids, which propagate just the same.
            span.end()
            return Span(context)
        span_context = span.get_span_context()
        ids = TraceContext(
            format(span_context.trace_id, "032x"),
            format(span_context.span_id, "016x"),
            int(span_context.trace_flags) & SAMPLED,
            parent_span_id=context.parent_span_id,
        )
        return Span(ids, span)
