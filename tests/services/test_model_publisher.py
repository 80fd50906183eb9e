"""The model worker's hand-built stream-event entries equal what the bus models dump (workers/model/publisher.py)."""

from __future__ import annotations

import pytest

from agentbus_redis.bus.events import IngressEnvelope, StreamEvent, parse_ingress
from agentbus_redis.json_types import JsonObject
from agentbus_redis.runtime.codec import signed_entry_fields
from agentbus_redis.streams.names import StreamNames
from agentbus_redis.streams.topology import Topology
from agentbus_redis.workers.model.publisher import SessionPublisher

KEY = b"k" * 32
EVENTS: list[JsonObject] = [
    {
        "type": "message_start",
        "message": {
            "id": "msg_1",
            "type": "message",
            "role": "assistant",
            "content": [],
            "model": "m",
            "stop_reason": None,
            "usage": {"input_tokens": 3},
        },
    },
    {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": 'héllo \u2028 "q"'}},
    {"type": "message_stop"},
]


@pytest.mark.parametrize("traceparent", [None, "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"])
@pytest.mark.parametrize("event", EVENTS)
def test_stream_event_fields_equal_the_models_dump(event: JsonObject, traceparent: str | None) -> None:
    publisher = SessionPublisher(
        None,  # type: ignore[arg-type]  # never writes here
        Topology(StreamNames(prefix="agentbus:", shards=4)),
        session_id="s-1",
        request_seq=7,
        internal_key=KEY,
        traceparent=traceparent,
    )
    built = publisher.stream_event_fields("req_9", 4, event)
    envelope = IngressEnvelope(
        session_id="s-1",
        idempotency_key="model:req_9:4",
        payload=StreamEvent(request_id="req_9", event=event, request_seq=7),
        traceparent=traceparent,
    )
    assert built == signed_entry_fields(envelope, KEY)
    assert parse_ingress(built["data"]) == envelope
    first = publisher.stream_event_fields("req_9", 0, event, max_tokens=1234)
    with_cap = envelope.model_copy(
        update={
            "idempotency_key": "model:req_9:0",
            "payload": StreamEvent(request_id="req_9", event=event, request_seq=7, max_tokens=1234),
        }
    )
    assert first == signed_entry_fields(with_cap, KEY)


def test_m8_5_withheld_stop_error_flag_equals_the_models_dump() -> None:
    """The ``message_delta`` of a cut reply the worker recovers from says so (``withhold_stop_error``)."""
    publisher = SessionPublisher(
        None,  # type: ignore[arg-type]  # never writes here
        Topology(StreamNames(prefix="agentbus:", shards=4)),
        session_id="s-1",
        request_seq=7,
        internal_key=KEY,
        traceparent=None,
    )
    event: JsonObject = {"type": "message_delta", "delta": {"stop_reason": "max_tokens"}, "usage": {"output_tokens": 9}}
    built = publisher.stream_event_fields("req_9", 5, event, withhold_stop_error=True)
    envelope = IngressEnvelope(
        session_id="s-1",
        idempotency_key="model:req_9:5",
        payload=StreamEvent(request_id="req_9", event=event, request_seq=7, withhold_stop_error=True),
        traceparent=None,
    )
    assert built == signed_entry_fields(envelope, KEY)
    assert parse_ingress(built["data"]) == envelope
