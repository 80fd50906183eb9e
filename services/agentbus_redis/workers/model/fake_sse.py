"""A scripted reply as the Messages API sends it: the whole Message (``stream: false``) or its SSE events
(M2.1, M2.2), byte-compatible with the official SDK's decoder (``event: <type>`` / ``data: <json>`` / blank
line; the SDK skips ``ping`` and raises on ``error``, M2.3).

Ids look like the API's (``msg_01…``, ``toolu_01…``, ``req_01…``). Usage is estimated from the request and
reply sizes (about four characters a token) unless the step gives it.
"""

from __future__ import annotations

import secrets
import string
from collections.abc import Iterator
from typing import Final

import orjson

from agentbus_redis.json_types import JsonObject, JsonValue
from agentbus_redis.workers.model.fake_steps import ReplyStep

_ID_ALPHABET: Final = string.ascii_letters + string.digits
PING: Final[JsonObject] = {"type": "ping"}


def api_id(prefix: str) -> str:
    """A fresh id in the API's shape: ``<prefix>_01`` and 22 base62 characters."""
    return f"{prefix}_01" + "".join(secrets.choice(_ID_ALPHABET) for _ in range(22))


def sse_frame(event: JsonObject) -> bytes:
    """One SSE frame: the event name is the payload's ``type`` (M2.1)."""
    return b"event: " + str(event["type"]).encode() + b"\ndata: " + orjson.dumps(event) + b"\n\n"


def error_body(error_type: str, message: str, request_id: str) -> JsonObject:
    """The API's error body (M3.1), also the payload of a mid-stream ``error`` event (M2.3)."""
    return {"type": "error", "error": {"type": error_type, "message": message}, "request_id": request_id}


def estimated_tokens(value: JsonValue) -> int:
    """About four characters a token, at least one."""
    return max(1, len(orjson.dumps(value)) // 4)


def final_usage(step: ReplyStep, request_body: JsonObject, content: list[JsonObject]) -> JsonObject:
    """The response's usage: estimates overridden by the step's ``usage`` fields."""
    prompt = {key: request_body.get(key) for key in ("system", "messages", "tools")}
    usage: JsonObject = {
        "input_tokens": estimated_tokens(prompt),
        "cache_creation_input_tokens": 0,
        "cache_read_input_tokens": 0,
        "cache_creation": {"ephemeral_5m_input_tokens": 0, "ephemeral_1h_input_tokens": 0},
        "output_tokens": estimated_tokens(list[JsonValue](content)) if content else 1,
        "service_tier": "standard",
    }
    usage.update(step.usage or {})
    return usage


def completed_content(step: ReplyStep) -> list[JsonObject]:
    """The step's blocks with what the API always fills in: tool ids, thinking signatures."""
    blocks: list[JsonObject] = []
    for block in step.content:
        filled = dict(block)
        if filled["type"] == "tool_use" and not filled.get("id"):
            filled = {"type": "tool_use", "id": api_id("toolu"), **{k: v for k, v in block.items() if k != "id"}}
        if filled["type"] == "thinking" and not filled.get("signature"):
            filled["signature"] = "sig_" + secrets.token_urlsafe(48)
        blocks.append(filled)
    return blocks


def whole_message(
    step: ReplyStep, *, message_id: str, model: str, content: list[JsonObject], usage: JsonObject
) -> JsonObject:
    """The non-streaming response body."""
    return {
        "id": message_id,
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": list(content),
        "stop_reason": step.resolved_stop_reason(),
        "stop_sequence": step.stop_sequence,
        "usage": usage,
    }


def _pieces(text: str, size: int) -> list[str]:
    return [text[i : i + size] for i in range(0, len(text), size)]


def _block_events(index: int, block: JsonObject, chunk_chars: int) -> Iterator[JsonObject]:
    """content_block_start, its deltas, content_block_stop (M2.2). Blocks without a delta type of their
    own (redacted thinking, server tool results, …) arrive whole in their start event."""
    kind = block["type"]
    deltas: list[JsonObject]
    if kind == "text":
        start: JsonObject = {**block, "text": ""}
        deltas = [{"type": "text_delta", "text": piece} for piece in _pieces(str(block["text"]), chunk_chars)]
    elif kind == "tool_use":
        start = {**block, "input": {}}
        raw = orjson.dumps(block["input"]).decode()
        # The API opens every tool input with an empty fragment.
        deltas = [{"type": "input_json_delta", "partial_json": p} for p in ["", *_pieces(raw, chunk_chars)]]
    elif kind == "thinking":
        start = {"type": "thinking", "thinking": "", "signature": ""}
        deltas = [{"type": "thinking_delta", "thinking": p} for p in _pieces(str(block["thinking"]), chunk_chars)]
        deltas.append({"type": "signature_delta", "signature": block["signature"]})
    else:
        start, deltas = block, []
    yield {"type": "content_block_start", "index": index, "content_block": start}
    for delta in deltas:
        yield {"type": "content_block_delta", "index": index, "delta": delta}
    yield {"type": "content_block_stop", "index": index}


def stream_events(message: JsonObject, step: ReplyStep) -> list[JsonObject]:
    """Every event of the streamed ``message`` in order, pings excluded (the server adds them)."""
    usage = message["usage"]
    assert isinstance(usage, dict)
    start_usage = {**usage, "output_tokens": min(1, int(str(usage.get("output_tokens", 1))))}
    events: list[JsonObject] = [
        {
            "type": "message_start",
            "message": {**message, "content": [], "stop_reason": None, "stop_sequence": None, "usage": start_usage},
        }
    ]
    content = message["content"]
    assert isinstance(content, list)
    for index, block in enumerate(content):
        assert isinstance(block, dict)
        events.extend(_block_events(index, block, step.chunk_chars))
    delta_usage = step.delta_usage
    if delta_usage is None:
        delta_usage = {key: value for key, value in usage.items() if key not in ("service_tier", "cache_creation")}
    events.append(
        {
            "type": "message_delta",
            "delta": {"stop_reason": message["stop_reason"], "stop_sequence": message["stop_sequence"]},
            "usage": delta_usage,
        }
    )
    events.append({"type": "message_stop"})
    return events
