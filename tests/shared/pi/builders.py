"""Hand-made pi wire objects (P1, P7) for the pi tests: messages, entries and whole session files."""

from __future__ import annotations

import json
from typing import Any

from pydantic import TypeAdapter

from agentbus_redis.pi.messages import PiLlmMessage, PiMessage

Obj = dict[str, Any]
MODEL = {"api": "anthropic-messages", "provider": "anthropic", "model": "claude-opus-4-5"}
LLM_ADAPTER: TypeAdapter[PiMessage] = TypeAdapter(PiMessage)


def u(text: str = "hi", ts: int = 1) -> Obj:
    return {"role": "user", "content": [{"type": "text", "text": text}], "timestamp": ts}


def tc(call_id: str, name: str = "bash", **arguments: Any) -> Obj:
    return {"type": "toolCall", "id": call_id, "name": name, "arguments": arguments or {"command": "ls"}}


def a(*blocks: Obj, stop: str = "toolUse", ts: int = 2, **extra: Any) -> Obj:
    usage = {"input": 1, "output": 2, "cacheRead": 0, "cacheWrite": 0, "totalTokens": 3}
    return {
        "role": "assistant",
        "content": list(blocks),
        **MODEL,
        "usage": usage,
        "stopReason": stop,
        "timestamp": ts,
    } | extra


def tr(call_id: str, text: str = "ok", *, name: str = "bash", error: bool = False, ts: int = 3) -> Obj:
    return {
        "role": "toolResult",
        "toolCallId": call_id,
        "toolName": name,
        "content": [{"type": "text", "text": text}],
        "details": {},
        "isError": error,
        "timestamp": ts,
    }


def text(value: str) -> Obj:
    return {"type": "text", "text": value}


def llm(*objects: Obj) -> list[PiLlmMessage]:
    return [LLM_ADAPTER.validate_python(obj, by_alias=True, by_name=False) for obj in objects]  # type: ignore[misc]


def header(session_id: str = "s1", version: int | None = 3) -> Obj:
    base = {"type": "session", "id": session_id, "timestamp": "2026-01-01T00:00:00.000Z", "cwd": "/proj"}
    return base | ({"version": version} if version is not None else {})


def entry(
    entry_id: str, parent: str | None, message: Obj | None = None, *, kind: str = "message", **fields: Any
) -> Obj:
    base = {"type": kind, "id": entry_id, "parentId": parent, "timestamp": f"2026-01-01T00:00:{len(entry_id):02d}.000Z"}
    return base | ({"message": message} if message is not None else {}) | fields


def session_file(*lines: Obj) -> bytes:
    return "".join(json.dumps(line, separators=(",", ":")) + "\n" for line in lines).encode()
