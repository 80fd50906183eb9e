"""``execute_tool {gen_ai.tool.name}`` spans: one per tool call a tool worker answers (M11.8), following the
OpenTelemetry GenAI semantic conventions for tool execution.

A span is a child of the job's ``traceparent`` (the span that dispatched the job), kind ``INTERNAL``, with
``gen_ai.operation.name`` = ``execute_tool``, ``gen_ai.tool.name``, ``gen_ai.tool.call.id`` (the ``tool_use``
id), ``gen_ai.tool.type`` = ``function`` (the model chose the arguments, the client side ran the code) and
``gen_ai.conversation.id`` (the session). A call whose result is an error sets ``error.type`` — the result's
own error type (``tool_not_found``, ``invalid_input``, ``tool_error``, an exception's qualified class name) or
its outcome (``denied``, ``timeout``, ``interrupted``) — and the span status ``ERROR``. A call answered
without running (unknown tool, invalid input, interrupted before it started) still gets its span, so every
tool_use of the trace has one.

Without a recording OpenTelemetry SDK the spans are ids only (:mod:`agentbus_redis.observability.tracing`).
"""

from __future__ import annotations

import asyncio
import importlib
from typing import Final

from agentbus_redis.messages.content import ToolUseBlock
from agentbus_redis.observability.tracing import Span, WorkerTracer
from agentbus_redis.tools.tool import ToolOutput

OPERATION: Final = "execute_tool"
TOOL_TYPE: Final = "function"
GENERIC_ERROR_TYPE: Final = "tool_error"
CANCELLED: Final = "cancelled"


def error_type_of(output: ToolOutput) -> str | None:
    """``error.type`` of a call's result: None when it succeeded."""
    if not output.is_error:
        return None
    return output.error_type or output.outcome or GENERIC_ERROR_TYPE


class ToolCallSpans:
    """The ``execute_tool`` spans of one job's calls, children of ``traceparent``."""

    def __init__(self, tracer: WorkerTracer, traceparent: str | None, *, conversation_id: str | None = None) -> None:
        self.tracer = tracer
        self.traceparent = traceparent
        self.conversation_id = conversation_id

    def open(self, block: ToolUseBlock) -> Span:
        attributes: dict[str, str | int | float | bool] = {
            "gen_ai.operation.name": OPERATION,
            "gen_ai.tool.name": block.name,
            "gen_ai.tool.call.id": block.id,
            "gen_ai.tool.type": TOOL_TYPE,
        }
        if self.conversation_id is not None:
            attributes["gen_ai.conversation.id"] = self.conversation_id
        return self.tracer.start(f"{OPERATION} {block.name}", self.traceparent, attributes=attributes, kind="INTERNAL")

    @staticmethod
    def close(span: Span, output: ToolOutput) -> None:
        """End ``span`` with the call's result: ``error.type`` and status ERROR when it failed."""
        error_type = error_type_of(output)
        if error_type is not None and span.otel_span is not None:
            span.set_attribute("error.type", error_type)
            status = importlib.import_module("opentelemetry.trace.status")
            span.otel_span.set_status(status.Status(status.StatusCode.ERROR, error_type))
        span.end()

    @staticmethod
    def abandon(span: Span) -> None:
        """End the span of a call stopped before it had a result (the job was torn down): ``cancelled``."""
        span.set_attribute("error.type", CANCELLED)
        span.end(asyncio.CancelledError("the call was stopped before it had a result"))
