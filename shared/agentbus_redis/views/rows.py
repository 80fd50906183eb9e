"""What the session page shows for each log entry and live delta: display rows, plain JSON the page renders
as text (never as markup: every string here may come from a producer or a model).

A row is ``{"kind": …, "seq": …, "uuid": …}`` plus the fields of its kind:

- ``user`` / ``text`` / ``thinking``: ``text``;
- ``tool_use``: ``id``, ``name``, ``input`` (the input as the model wrote it);
- ``tool_result``: ``tool_use_id``, ``text``, ``is_error``;
- ``progress``: ``tool_use_id``, ``text`` (the progress data, summarized);
- ``api_error``: ``text`` (the M7 text the model's failure left in the conversation);
- ``system``: ``subtype``, ``text``;
- ``attachment``: ``subtype``;
- ``tombstone``: ``retracts`` (the uuid of the reply it marks as retracted);
- ``delta``: ``request_id``, ``index``, ``delta_kind`` (text or thinking), ``text`` (live text of a block still
  streaming, to append until its logged block replaces it).
"""

from __future__ import annotations

import json
from typing import Any

from agentbus_redis.json_types import JsonObject

Row = dict[str, Any]

MAX_TEXT_CHARS = 20_000
"""A longer text (a tool's output) is cut, saying so: the raw event log has it whole."""


def _text(value: object) -> str:
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
    return (
        text if len(text) <= MAX_TEXT_CHARS else text[:MAX_TEXT_CHARS] + f"… [{len(text) - MAX_TEXT_CHARS} more chars]"
    )


def _content_text(content: object) -> str:
    """A tool result's content (a string, or text and image blocks) as text."""
    if isinstance(content, list):
        parts = [
            str(block.get("text", "")) if block.get("type") == "text" else f"[{block.get('type')}]"
            for block in content
            if isinstance(block, dict)
        ]
        return _text("\n".join(parts))
    return _text(content if content is not None else "")


def _block_row(block: JsonObject, base: Row, *, role: str) -> Row:
    kind = block.get("type")
    if kind == "text":
        return {**base, "kind": "user" if role == "user" else "text", "text": _text(block.get("text", ""))}
    if kind == "thinking":
        return {**base, "kind": "thinking", "text": _text(block.get("thinking", ""))}
    if kind == "redacted_thinking":
        return {**base, "kind": "thinking", "text": "[redacted thinking]"}
    if kind == "tool_use":
        return {
            **base,
            "kind": "tool_use",
            "id": block.get("id"),
            "name": block.get("name"),
            "input": block.get("input"),
        }
    if kind == "tool_result":
        return {
            **base,
            "kind": "tool_result",
            "tool_use_id": block.get("tool_use_id"),
            "text": _content_text(block.get("content")),
            "is_error": bool(block.get("is_error")),
        }
    return {**base, "kind": "other", "text": f"[{kind}]"}


def message_rows(seq: int, message: JsonObject) -> list[Row]:
    """The display rows of the log entry ``seq`` holding ``message`` (its wire form)."""
    kind = message.get("type")
    base: Row = {"seq": seq, "uuid": message.get("uuid")}
    body = message.get("message")
    if kind == "tombstone":
        retracted = body.get("uuid") if isinstance(body, dict) else None
        return [{**base, "kind": "tombstone", "retracts": retracted}]
    if kind in ("user", "assistant") and isinstance(body, dict):
        if kind == "assistant" and message.get("isApiErrorMessage"):
            return [{**base, "kind": "api_error", "text": _content_text(body.get("content"))}]
        content = body.get("content")
        if isinstance(content, str):
            return [{**base, "kind": "user" if kind == "user" else "text", "text": _text(content)}]
        if isinstance(content, list):
            return [_block_row(block, base, role=kind) for block in content if isinstance(block, dict)]
        return []
    if kind == "progress":
        return [
            {**base, "kind": "progress", "tool_use_id": message.get("toolUseID"), "text": _text(message.get("data"))}
        ]
    if kind == "system":
        return [
            {**base, "kind": "system", "subtype": message.get("subtype"), "text": _text(message.get("content", ""))}
        ]
    if kind == "attachment":
        attachment = message.get("attachment")
        subtype = attachment.get("type") if isinstance(attachment, dict) else None
        return [{**base, "kind": "attachment", "subtype": subtype}]
    return [{**base, "kind": "other", "text": f"[{kind}]"}]


def delta_row(request_id: str, index: int, kind: str, text: str) -> Row:
    """A live delta (bus/live_reply.py) as a row."""
    return {"kind": "delta", "request_id": request_id, "index": index, "delta_kind": kind, "text": text}


def fresh_delta(after_seq: int, logged_seq: int) -> bool:
    """Whether a live delta applied at log position ``after_seq`` still shows text the log does not hold, when
    the page has the log up to ``logged_seq``: a delta before the last logged entry belongs to a block that
    has been logged since (each block is its own message, R9)."""
    return after_seq >= logged_seq


__all__ = ["MAX_TEXT_CHARS", "Row", "delta_row", "fresh_delta", "message_rows"]
