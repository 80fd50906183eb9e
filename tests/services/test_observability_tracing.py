"""W3C Trace Context handling (https://www.w3.org/TR/trace-context/ §3.2) and its log binding."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest
import structlog

from agentbus_redis.observability import tracing
from agentbus_redis.observability.tracing import (
    SAMPLED,
    TraceContext,
    TraceparentError,
    WorkerTracer,
    continue_trace,
    format_traceparent,
    new_root,
    parse_traceparent,
)

W3C_EXAMPLE = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"


def test_w3c_3_2_parse_spec_example() -> None:
    context = parse_traceparent(W3C_EXAMPLE)
    assert context == TraceContext("4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7", SAMPLED)
    assert context.sampled
    assert context.traceparent == W3C_EXAMPLE


def test_w3c_3_2_unsampled_flag_round_trips() -> None:
    value = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00"
    context = parse_traceparent(value)
    assert not context.sampled
    assert context.traceparent == value


@pytest.mark.parametrize(
    ("value", "reason"),
    [
        ("00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01", "lowercase hex"),
        ("ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01", "version ff"),
        ("00-00000000000000000000000000000000-00f067aa0ba902b7-01", "trace-id is all zeros"),
        ("00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01", "parent-id is all zeros"),
        ("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-extra", "exactly 55"),
        ("01-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01x", "future version"),
        ("00-4bf92f3577b34da6a3ce929d0e0e473-00f067aa0ba902b7-01", "2-32-16-2"),
        ("", "2-32-16-2"),
        ("not a traceparent", "2-32-16-2"),
    ],
)
def test_w3c_3_2_invalid_values_are_rejected_with_a_reason(value: str, reason: str) -> None:
    with pytest.raises(TraceparentError, match=reason) as caught:
        parse_traceparent(value)
    assert caught.value.value == value


def test_w3c_3_2_future_version_with_extra_fields_is_parsed() -> None:
    context = parse_traceparent("cc-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-09-whatever")
    assert context.trace_id == "4bf92f3577b34da6a3ce929d0e0e4736"
    # Only the sampled bit is defined; downstream we emit version 00 with known flags only.
    assert context.flags == SAMPLED
    assert context.traceparent == W3C_EXAMPLE


def test_format_rejects_bad_ids() -> None:
    with pytest.raises(TraceparentError):
        format_traceparent("0" * 32, "00f067aa0ba902b7")
    with pytest.raises(TraceparentError):
        format_traceparent("4bf92f3577b34da6a3ce929d0e0e4736", "short")
    with pytest.raises(TraceparentError, match="one byte"):
        format_traceparent("4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7", 256)


def test_new_root_ids_are_random_lowercase_hex() -> None:
    roots = {new_root().trace_id for _ in range(50)}
    assert len(roots) == 50
    root = new_root(sampled=False)
    assert parse_traceparent(root.traceparent) == TraceContext(root.trace_id, root.span_id, 0)
    assert root.parent_span_id is None


def test_child_keeps_trace_and_flags_and_points_at_parent() -> None:
    parent = parse_traceparent(W3C_EXAMPLE)
    child = parent.child()
    assert child.trace_id == parent.trace_id
    assert child.flags == parent.flags
    assert child.parent_span_id == parent.span_id
    assert child.span_id != parent.span_id
    grandchild = child.child()
    assert grandchild.parent_span_id == child.span_id


def test_continue_trace_child_of_incoming() -> None:
    context = continue_trace(W3C_EXAMPLE)
    assert context.trace_id == "4bf92f3577b34da6a3ce929d0e0e4736"
    assert context.parent_span_id == "00f067aa0ba902b7"


def test_continue_trace_without_traceparent_starts_a_root() -> None:
    context = continue_trace(None)
    assert context.parent_span_id is None
    parse_traceparent(context.traceparent)


def test_continue_trace_invalid_restarts_and_reports() -> None:
    seen: list[TraceparentError] = []
    context = continue_trace("00-garbage", on_invalid=seen.append)
    assert context.parent_span_id is None
    assert [error.value for error in seen] == ["00-garbage"]


def test_span_binds_trace_ids_to_log_context_and_restores() -> None:
    structlog.contextvars.clear_contextvars()
    structlog.contextvars.bind_contextvars(trace_id="outer")
    tracer = WorkerTracer("ingestion")
    with tracer.start("ingest", W3C_EXAMPLE) as span:
        bound = structlog.contextvars.get_contextvars()
        assert bound["trace_id"] == "4bf92f3577b34da6a3ce929d0e0e4736"
        assert bound["span_id"] == span.context.span_id
        assert span.traceparent.startswith("00-4bf92f3577b34da6a3ce929d0e0e4736-")
    assert structlog.contextvars.get_contextvars() == {"trace_id": "outer"}
    structlog.contextvars.clear_contextvars()


def test_worker_tracer_counts_invalid_traceparents() -> None:
    seen: list[str] = []
    tracer = WorkerTracer("tools", on_invalid=lambda error: seen.append(error.reason))
    span = tracer.start("run_tools", "00-nope")
    assert span.context.parent_span_id is None
    assert len(seen) == 1


@pytest.mark.skipif(tracing.otel_available(), reason="checks the behaviour without the otel extra")
def test_without_opentelemetry_ids_still_propagate() -> None:
    tracer = WorkerTracer("normalization")
    span = tracer.start("normalize", W3C_EXAMPLE)
    assert span.otel_span is None
    assert span.context.parent_span_id == "00f067aa0ba902b7"
    span.end()


OTEL_SCRIPT = textwrap.dedent(
    """
    from opentelemetry import trace
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    trace.set_tracer_provider(provider)

    from agentbus_redis.observability.tracing import WorkerTracer

    tracer = WorkerTracer("tools")
    with tracer.start("run_tools", "TRACEPARENT", attributes={"session.id": "s1"}) as span:
        propagated = span.traceparent
    (finished,) = exporter.get_finished_spans()
    context = finished.get_span_context()
    assert propagated == f"00-{context.trace_id:032x}-{context.span_id:016x}-01", propagated
    assert finished.parent.span_id == 0x00f067aa0ba902b7
    assert finished.attributes["session.id"] == "s1"
    root = tracer.start_root("send")
    assert root.otel_span is not None and root.context.parent_span_id is None
    root.end()
    print("ok")
    """
).replace("TRACEPARENT", W3C_EXAMPLE)


def test_with_opentelemetry_sdk_spans_are_real_and_ids_match() -> None:
    """Runs only where the ``otel`` extra is installed (e.g. ``uv sync --extra otel``)."""
    pytest.importorskip("opentelemetry.sdk.trace")
    result = subprocess.run([sys.executable, "-c", OTEL_SCRIPT], capture_output=True, text=True, check=False)
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "ok"


CONSOLE_SCRIPT = textwrap.dedent(
    """
    from agentbus_redis.observability.tracing import WorkerTracer, configure_tracing

    assert configure_tracing("agentbus-test") is True
    span = WorkerTracer("transcripts").start("persist", None)
    span.end()
    from opentelemetry import trace

    trace.get_tracer_provider().shutdown()
    """
)


def test_configure_tracing_console_exporter_prints_spans() -> None:
    """``OTEL_TRACES_EXPORTER=console`` installs an SDK provider (only with the ``otel`` extra)."""
    pytest.importorskip("opentelemetry.sdk.trace")
    env = {**os.environ, "OTEL_TRACES_EXPORTER": "console", "OTEL_SERVICE_NAME": "agentbus-test-svc"}
    result = subprocess.run(
        [sys.executable, "-c", CONSOLE_SCRIPT], capture_output=True, text=True, check=False, env=env
    )
    assert result.returncode == 0, result.stderr
    assert '"name": "persist"' in result.stdout
    assert "agentbus-test-svc" in result.stdout


def test_configure_tracing_is_a_no_op_without_an_exporter(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OTEL_TRACES_EXPORTER", raising=False)
    assert tracing.configure_tracing("agentbus-test") is False
    monkeypatch.setenv("OTEL_TRACES_EXPORTER", "none")
    assert tracing.configure_tracing("agentbus-test") is False
