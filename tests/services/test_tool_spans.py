"""M11.8: one ``execute_tool {name}`` span per tool call, with the OTel GenAI attributes, parented on the job's
traceparent, ``error.type`` on a failed call. Real spans: an OpenTelemetry SDK tracer provider with the SDK's
in-memory exporter, in a child process (a process has one global tracer provider; the tracing module reads it
at import)."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from agentbus_redis.workers.tools import results
from agentbus_redis.workers.tools.tool_spans import error_type_of
from tests.cli.process import REPO_ROOT

JOB_TRACEPARENT = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"

SCRIPT = textwrap.dedent(
    """
    import asyncio, json, sys
    from opentelemetry import trace
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    trace.set_tracer_provider(provider)

    from agentbus_redis.observability.tracing import WorkerTracer
    from agentbus_redis.workers.tools.executor import execute_tool_uses
    from agentbus_redis.workers.tools.registry import default_registry
    from agentbus_redis.workers.tools.tool_spans import ToolCallSpans
    from agentbus_redis.workers.tools.workspace import Workspace
    from agentbus_redis.messages.content import ToolUseBlock
    from agentbus_redis.permissions.decide import PermissionContext

    root, traceparent = sys.argv[1], sys.argv[2]
    workspace = Workspace.at(root)
    (workspace.root / "a.txt").write_text("hello\\n")
    calls = [
        ToolUseBlock(id="toolu_read", name="Read", input={"file_path": "a.txt"}),
        ToolUseBlock(id="toolu_missing", name="Read", input={"file_path": "missing.txt"}),
        ToolUseBlock(id="toolu_unknown", name="Frobnicate", input={}),
        ToolUseBlock(id="toolu_invalid", name="Glob", input={"path": "."}),
        ToolUseBlock(id="toolu_bash", name="Bash", input={"command": "exit 3"}),
        ToolUseBlock(id="toolu_after", name="Read", input={"file_path": "a.txt"}),
    ]
    spans = ToolCallSpans(WorkerTracer("tools"), traceparent, conversation_id="session-1")

    async def run():
        return [
            message
            async for message in execute_tool_uses(
                calls,
                assistant_uuid="aaaaaaaa-0000-4000-8000-000000000001",
                registry=default_registry(workspace),
                permissions=PermissionContext(workspace_root=str(workspace.root), mode="bypassPermissions"),
                spans=spans,
            )
        ]

    asyncio.run(run())
    out = []
    for span in exporter.get_finished_spans():
        context = span.get_span_context()
        out.append(
            {
                "name": span.name,
                "kind": span.kind.name,
                "trace_id": format(context.trace_id, "032x"),
                "parent": None if span.parent is None else format(span.parent.span_id, "016x"),
                "status": span.status.status_code.name,
                "attributes": dict(span.attributes),
            }
        )
    print(json.dumps(out))
    """
)


def test_m11_8_execute_tool_spans_one_per_call_with_genai_attributes(tmp_path: Path) -> None:
    pytest.importorskip("opentelemetry.sdk.trace")
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT, str(tmp_path), JOB_TRACEPARENT],
        capture_output=True,
        text=True,
        check=False,
        cwd=REPO_ROOT,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    spans = {span["attributes"]["gen_ai.tool.call.id"]: span for span in json.loads(done.stdout)}
    assert set(spans) == {"toolu_read", "toolu_missing", "toolu_unknown", "toolu_invalid", "toolu_bash", "toolu_after"}
    for call_id, span in spans.items():
        assert span["name"] == f"execute_tool {span['attributes']['gen_ai.tool.name']}", call_id
        assert span["kind"] == "INTERNAL"
        assert span["trace_id"] == "4bf92f3577b34da6a3ce929d0e0e4736"
        assert span["parent"] == "00f067aa0ba902b7"  # the job's span
        attributes = span["attributes"]
        assert attributes["gen_ai.operation.name"] == "execute_tool"
        assert attributes["gen_ai.tool.type"] == "function"
        assert attributes["gen_ai.conversation.id"] == "session-1"
    assert spans["toolu_read"]["status"] == "UNSET"
    assert "error.type" not in spans["toolu_read"]["attributes"]
    assert spans["toolu_read"]["attributes"]["gen_ai.tool.name"] == "Read"
    expected_errors = {
        "toolu_missing": "tool_error",  # the tool's own ToolError (file does not exist)
        "toolu_unknown": "tool_not_found",
        "toolu_invalid": "invalid_input",
        "toolu_bash": "tool_error",  # a non-zero exit is an error result
        "toolu_after": "interrupted",  # R8.10: cancelled by the erroring Bash call before it started
    }
    for call_id, error_type in expected_errors.items():
        assert spans[call_id]["attributes"]["error.type"] == error_type, call_id
        assert spans[call_id]["status"] == "ERROR", call_id


def test_error_type_of_results() -> None:
    """error.type: the result's own error type, else its outcome, else ``tool_error``; none on success."""
    assert error_type_of(results.error_calling_tool("Read", KeyError("x"))) == "builtins.KeyError"
    assert error_type_of(results.timed_out("Bash", 2)) == "timeout"
    assert error_type_of(results.permission_denied("no")) == "denied"
    assert error_type_of(results.user_interrupted()) == "interrupted"
    assert error_type_of(results.no_such_tool("X")) == "tool_not_found"
