"""A local Anthropic Messages API that real clients (Claude Code, pi) talk to offline.

It answers ``POST /v1/messages`` with scripted replies, streamed as SSE exactly as the API streams them
(``message_start``, ``content_block_start``/``delta``/``stop``, ``message_delta``, ``message_stop``), and
records every request body it receives so a test can compare the client's own request with the one
agentbus builds. Anything else a client calls (``count_tokens``, ``HEAD /``, model listings, telemetry
that slipped through) gets a small valid answer so the client runs without the network.

Replies are scripted per conversation *lane*: a request whose first message carries
:data:`SUBAGENT_MARKER` (a test puts it in the prompt it hands a sub-agent) belongs to the sub-agent, a
request without tools (a title or a topic check) to the ``side`` lane, which answers the fallback text, and
any other to the main agent. Each lane pops its own queue, so a sub-agent's requests interleaved with the
main agent's never take each other's replies.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

JsonObject = dict[str, Any]

SUBAGENT_MARKER = "[compat-subagent]"


@dataclass(frozen=True)
class Text:
    text: str


@dataclass(frozen=True)
class Thinking:
    thinking: str
    signature: str


@dataclass(frozen=True)
class ToolUse:
    id: str
    name: str
    input: JsonObject


Block = Text | Thinking | ToolUse


@dataclass(frozen=True)
class Reply:
    """One scripted assistant reply; ``stop_reason`` follows from its blocks unless given."""

    blocks: tuple[Block, ...]
    stop_reason: str | None = None

    def effective_stop_reason(self) -> str:
        if self.stop_reason is not None:
            return self.stop_reason
        return "tool_use" if any(isinstance(block, ToolUse) for block in self.blocks) else "end_turn"


def reply(*blocks: Block, stop_reason: str | None = None) -> Reply:
    return Reply(blocks=blocks, stop_reason=stop_reason)


@dataclass
class RecordedRequest:
    method: str
    path: str
    headers: dict[str, str]
    body: JsonObject | None
    lane: str | None = None
    reply_id: str | None = None
    """The id of the assistant message the server answered with (Messages requests only)."""


@dataclass
class Script:
    """Scripted replies per lane; an exhausted lane answers ``fallback``."""

    main: list[Reply] = field(default_factory=list)
    subagent: list[Reply] = field(default_factory=list)
    fallback: Reply = field(default_factory=lambda: reply(Text("Done.")))


def request_lane(body: JsonObject) -> str:
    """Which conversation a Messages request belongs to (see the module docstring)."""
    if not body.get("tools"):
        return "side"
    messages = body.get("messages") or []
    if messages and SUBAGENT_MARKER in json.dumps(messages[0].get("content")):
        return "subagent"
    return "main"


def sse_events(reply_: Reply, message_id: str, model: str) -> Iterator[tuple[str, JsonObject]]:
    """The SSE events of one streamed reply, in the API's order."""
    yield (
        "message_start",
        {
            "type": "message_start",
            "message": {
                "id": message_id,
                "type": "message",
                "role": "assistant",
                "model": model,
                "content": [],
                "stop_reason": None,
                "stop_sequence": None,
                "usage": {
                    "input_tokens": 12,
                    "output_tokens": 1,
                    "cache_creation_input_tokens": 0,
                    "cache_read_input_tokens": 0,
                },
            },
        },
    )
    for index, block in enumerate(reply_.blocks):
        if isinstance(block, Text):
            yield (
                "content_block_start",
                {"type": "content_block_start", "index": index, "content_block": {"type": "text", "text": ""}},
            )
            yield (
                "content_block_delta",
                {"type": "content_block_delta", "index": index, "delta": {"type": "text_delta", "text": block.text}},
            )
        elif isinstance(block, Thinking):
            yield (
                "content_block_start",
                {
                    "type": "content_block_start",
                    "index": index,
                    "content_block": {"type": "thinking", "thinking": "", "signature": ""},
                },
            )
            yield (
                "content_block_delta",
                {
                    "type": "content_block_delta",
                    "index": index,
                    "delta": {"type": "thinking_delta", "thinking": block.thinking},
                },
            )
            yield (
                "content_block_delta",
                {
                    "type": "content_block_delta",
                    "index": index,
                    "delta": {"type": "signature_delta", "signature": block.signature},
                },
            )
        else:
            yield (
                "content_block_start",
                {
                    "type": "content_block_start",
                    "index": index,
                    "content_block": {"type": "tool_use", "id": block.id, "name": block.name, "input": {}},
                },
            )
            yield (
                "content_block_delta",
                {
                    "type": "content_block_delta",
                    "index": index,
                    "delta": {"type": "input_json_delta", "partial_json": json.dumps(block.input)},
                },
            )
        yield "content_block_stop", {"type": "content_block_stop", "index": index}
    yield (
        "message_delta",
        {
            "type": "message_delta",
            "delta": {"stop_reason": reply_.effective_stop_reason(), "stop_sequence": None},
            "usage": {"output_tokens": 7},
        },
    )
    yield "message_stop", {"type": "message_stop"}


def message_json(reply_: Reply, message_id: str, model: str) -> JsonObject:
    """The same reply as one non-streamed Messages response."""
    content: list[JsonObject] = []
    for block in reply_.blocks:
        if isinstance(block, Text):
            content.append({"type": "text", "text": block.text})
        elif isinstance(block, Thinking):
            content.append({"type": "thinking", "thinking": block.thinking, "signature": block.signature})
        else:
            content.append({"type": "tool_use", "id": block.id, "name": block.name, "input": block.input})
    return {
        "id": message_id,
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": content,
        "stop_reason": reply_.effective_stop_reason(),
        "stop_sequence": None,
        "usage": {
            "input_tokens": 12,
            "output_tokens": 7,
            "cache_creation_input_tokens": 0,
            "cache_read_input_tokens": 0,
        },
    }


class CaptureServer:
    """The server; ``start()`` binds 127.0.0.1 on a free port before anyone learns the URL."""

    def __init__(self) -> None:
        self.script = Script()
        self.requests: list[RecordedRequest] = []
        self._lock = threading.Lock()
        self._counter = 0
        self._httpd: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        assert self._httpd is not None, "server not started"
        return f"http://127.0.0.1:{self._httpd.server_address[1]}"

    def start(self) -> CaptureServer:
        server = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, format: str, *args: Any) -> None:  # the suite's output stays quiet
                return

            def _body(self) -> JsonObject | None:
                length = int(self.headers.get("content-length") or 0)
                raw = self.rfile.read(length) if length else b""
                if not raw:
                    return None
                try:
                    parsed = json.loads(raw)
                except ValueError:
                    return {"_raw": raw.decode("utf-8", "replace")}
                return parsed if isinstance(parsed, dict) else {"_json": parsed}

            def _send_json(self, status: int, payload: JsonObject) -> None:
                data = json.dumps(payload).encode()
                self.send_response(status)
                self.send_header("content-type", "application/json")
                self.send_header("content-length", str(len(data)))
                self.send_header("request-id", "req_capture")
                self.end_headers()
                self.wfile.write(data)

            def do_HEAD(self) -> None:
                server._record(self, None)
                self.send_response(200)
                self.send_header("content-length", "0")
                self.end_headers()

            def do_GET(self) -> None:
                server._record(self, None)
                if self.path.startswith("/v1/models"):
                    self._send_json(200, {"data": [], "has_more": False, "first_id": None, "last_id": None})
                else:
                    self._send_json(200, {})

            def do_POST(self) -> None:
                body = self._body()
                path = self.path.split("?", 1)[0]
                if path.endswith("/v1/messages/count_tokens"):
                    server._record(self, body)
                    self._send_json(200, {"input_tokens": 100})
                    return
                if not path.endswith("/v1/messages") or body is None:
                    server._record(self, body)
                    self._send_json(200, {})
                    return
                lane = request_lane(body)
                reply_, message_id = server._next_reply(lane, self, body)
                model = str(body.get("model", "claude-sonnet-4-5"))
                if body.get("stream"):
                    self.send_response(200)
                    self.send_header("content-type", "text/event-stream")
                    self.send_header("cache-control", "no-cache")
                    self.send_header("request-id", "req_capture")
                    self.send_header("connection", "close")
                    self.end_headers()
                    for event, data in sse_events(reply_, message_id, model):
                        self.wfile.write(f"event: {event}\ndata: {json.dumps(data)}\n\n".encode())
                    self.wfile.flush()
                    self.close_connection = True
                else:
                    self._send_json(200, message_json(reply_, message_id, model))

        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._httpd.daemon_threads = True
        self._thread = threading.Thread(target=self._httpd.serve_forever, name="capture-server", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        if self._httpd is not None:
            self._httpd.shutdown()
            self._httpd.server_close()
            self._httpd = None

    def reset(self, script: Script) -> None:
        with self._lock:
            self.script = script
            self.requests = []

    def _record(self, handler: BaseHTTPRequestHandler, body: JsonObject | None, lane: str | None = None) -> None:
        with self._lock:
            self.requests.append(
                RecordedRequest(
                    handler.command, handler.path, {k.lower(): v for k, v in handler.headers.items()}, body, lane
                )
            )

    def _next_reply(self, lane: str, handler: BaseHTTPRequestHandler, body: JsonObject) -> tuple[Reply, str]:
        with self._lock:
            self._counter += 1
            message_id = f"msg_capture{self._counter:04d}"
            self.requests.append(
                RecordedRequest(
                    handler.command,
                    handler.path,
                    {k.lower(): v for k, v in handler.headers.items()},
                    body,
                    lane,
                    message_id,
                )
            )
            queue = {"main": self.script.main, "subagent": self.script.subagent}.get(lane)
            chosen = queue.pop(0) if queue else self.script.fallback
            return chosen, message_id

    def message_requests(self, lane: str | None = None) -> list[RecordedRequest]:
        """The Messages requests received (of one lane when given), in arrival order."""
        with self._lock:
            return [r for r in self.requests if r.body is not None and r.lane is not None and lane in (None, r.lane)]
