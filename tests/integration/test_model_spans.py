"""M11.1–M11.4: one ``chat {model}`` CLIENT span per logical model call, parented on the request's traceparent,
with the GenAI attributes (M11.3's input-token sum) and one event per retry. Real spans: an OpenTelemetry SDK
tracer provider with the in-memory exporter, in a child process (one global provider per process) that runs
the model worker's request handling against a real Redis and the fake server over HTTP."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import pytest

from tests.cli.process import REPO_ROOT

pytestmark = [pytest.mark.integration]

TRACEPARENT = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"

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

    import orjson
    import redis.asyncio as aioredis
    from agentbus_redis.workers.model.app import model_client, model_defaults
    from agentbus_redis.workers.model.fake_server import FakeModelServer
    from agentbus_redis.workers.model.worker import ModelWorker
    from agentbus_redis.runtime.codec import entry_fields
    from agentbus_redis.streams.entries import StreamEntry
    from agentbus_redis.config.settings import Settings
    from agentbus_redis.runtime.slots import JobSlots
    from agentbus_redis.streams.topology import MODEL_GROUP, Topology
    from agentbus_redis.bus.events import RequestReady
    from agentbus_redis.model.cost import DEFAULT_PRICES

    redis_url, traceparent = sys.argv[1], sys.argv[2]
    session = "span-session"
    steps = [
        {"kind": "http_error", "status": 500, "error_type": "api_error", "message": "boom"},
        {"kind": "reply", "content": [{"type": "text", "text": "hi"}], "stop_reason": "end_turn",
         "usage": {"input_tokens": 10, "output_tokens": 5, "cache_read_input_tokens": 100,
                   "cache_creation_input_tokens": 20}},
    ]

    async def run(base_url):
        import os
        os.environ.update({"ANTHROPIC_API_KEY": "k", "AGENTBUS_MODEL__BASE_URL": base_url,
                           "AGENTBUS_MODEL__RETRY_BASE_DELAY_MS": "10", "AGENTBUS_SHARDS": "4"})
        settings = Settings(_env_file=None)
        redis = aioredis.Redis.from_url(redis_url)
        topology = Topology(settings.names)
        body = {"session_id": session, "seq": 1, "request": {"messages": [{"role": "user", "content": "hi"}]}}
        await redis.set(topology.request(session), orjson.dumps(body))
        notice = RequestReady(session_id=session, seq=1, key=topology.request(session), message_count=1,
                              traceparent=traceparent)
        stream = topology.requests_for(session)
        await redis.xgroup_create(stream, MODEL_GROUP, id="0", mkstream=True)
        entry_id = await redis.xadd(stream, entry_fields(notice))
        async def no_tools():
            return []
        worker = ModelWorker(
            redis, topology, consumer="span-test", settings=settings.model, client=model_client(settings),
            defaults=model_defaults(settings), tools=no_tools, prices=DEFAULT_PRICES, internal_key=b"k" * 32,
            slots=JobSlots(redis, group=MODEL_GROUP, size=1), keepalive_s=1.0,
        )
        entry = StreamEntry(stream, entry_id.decode(), entry_fields(notice), 1)
        await worker._run(entry, notice)
        await redis.aclose()

    with FakeModelServer.running() as fake:
        fake.admin.script(session, steps)
        asyncio.run(run(fake.base_url))
    out = []
    for span in exporter.get_finished_spans():
        context = span.get_span_context()
        out.append({
            "name": span.name,
            "kind": span.kind.name,
            "trace_id": format(context.trace_id, "032x"),
            "parent": None if span.parent is None else format(span.parent.span_id, "016x"),
            "attributes": dict(span.attributes),
            "events": [{"name": e.name, "attributes": dict(e.attributes)} for e in span.events],
        })
    print(json.dumps(out))
    """
)


def test_m11_chat_span_per_logical_call_with_genai_attributes_and_retry_events(redis_url: str) -> None:
    pytest.importorskip("opentelemetry.sdk.trace")
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT, redis_url, TRACEPARENT],
        capture_output=True,
        text=True,
        check=False,
        cwd=REPO_ROOT,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr[-4000:]
    (span,) = [s for s in json.loads(done.stdout.splitlines()[-1]) if s["name"].startswith("chat ")]
    assert span["name"] == "chat claude-sonnet-4-6"  # M11.1
    assert span["kind"] == "CLIENT"
    assert span["trace_id"] == "4bf92f3577b34da6a3ce929d0e0e4736"
    assert span["parent"] == "00f067aa0ba902b7"  # the request notice's span
    attributes = span["attributes"]
    assert attributes["gen_ai.operation.name"] == "chat"
    assert attributes["gen_ai.provider.name"] == "anthropic"
    assert attributes["gen_ai.request.model"] == "claude-sonnet-4-6"
    assert attributes["gen_ai.conversation.id"] == "span-session"
    assert attributes["gen_ai.usage.input_tokens"] == 10 + 100 + 20  # M11.3
    assert attributes["gen_ai.usage.output_tokens"] == 5
    assert attributes["gen_ai.usage.cache_read.input_tokens"] == 100
    assert attributes["gen_ai.response.finish_reasons"] == ["end_turn"]
    assert "error.type" not in attributes  # the call finally succeeded (M11.4)
    (retry,) = span["events"]
    assert retry["name"] == "retry"
    assert retry["attributes"]["retry.attempt"] == 1
    assert retry["attributes"]["error.type"] == "api_error"
    assert retry["attributes"]["http.response.status_code"] == 500
