"""Raw Messages API request pieces (plain dicts, as the normalizer stores them) and hypothesis strategies
for the model-call rule tests."""

from __future__ import annotations

from typing import Any

from hypothesis import strategies as st

from agentbus_redis.json_types import JsonObject


def text(value: str, **extra: Any) -> JsonObject:
    return {"type": "text", "text": value, **extra}


def thinking(value: str = "hmm", signature: str = "sig") -> JsonObject:
    return {"type": "thinking", "thinking": value, "signature": signature}


def tool_use(tool_id: str, name: str = "Read") -> JsonObject:
    return {"type": "tool_use", "id": tool_id, "name": name, "input": {}}


def tool_result(tool_id: str, content: Any = "ok", **extra: Any) -> JsonObject:
    return {"type": "tool_result", "tool_use_id": tool_id, "content": content, **extra}


def user(*blocks: JsonObject | str) -> JsonObject:
    if len(blocks) == 1 and isinstance(blocks[0], str):
        return {"role": "user", "content": blocks[0]}
    return {"role": "user", "content": list(blocks)}


def assistant(*blocks: JsonObject) -> JsonObject:
    return {"role": "assistant", "content": list(blocks)}


MARKER = {"type": "ephemeral"}

_texts = st.text(min_size=1, max_size=8)
_maybe_marker = st.one_of(st.just({}), st.just({"cache_control": {"type": "ephemeral"}}))


@st.composite
def blocks(draw: st.DrawFn) -> JsonObject:
    """One content block, sometimes already carrying a marker (nested too)."""
    kind = draw(st.sampled_from(["text", "thinking", "tool_use", "tool_result", "redacted_thinking", "image"]))
    extra = draw(_maybe_marker)
    if kind == "text":
        return text(draw(st.text(max_size=5)), **extra)
    if kind == "thinking":
        return {**thinking(draw(_texts)), **extra}
    if kind == "redacted_thinking":
        return {"type": "redacted_thinking", "data": "x", **extra}
    if kind == "tool_use":
        return {**tool_use(draw(_texts)), **extra}
    if kind == "image":
        return {"type": "image", "source": {"type": "url", "url": "https://x"}, **extra}
    nested = draw(st.lists(st.builds(lambda t, m: text(t, **m), _texts, _maybe_marker), max_size=3))
    return tool_result(draw(_texts), nested if nested else "ok", **extra)


@st.composite
def messages(draw: st.DrawFn) -> list[JsonObject]:
    """Any alternation of user and assistant messages with string or block content (not necessarily a
    valid conversation: the cache and copy rules must hold for every shape)."""
    result: list[JsonObject] = []
    for index in range(draw(st.integers(min_value=0, max_value=6))):
        role = "user" if index % 2 == 0 else "assistant"
        if role == "user" and draw(st.booleans()):
            result.append({"role": role, "content": draw(st.text(max_size=5))})
        else:
            result.append({"role": role, "content": draw(st.lists(blocks(), max_size=4))})
    return result


@st.composite
def tool_definitions(draw: st.DrawFn) -> list[JsonObject]:
    names = draw(st.lists(st.sampled_from(["Read", "Bash", "Edit", "Grep", "Glob", "Write"]), unique=True, max_size=6))
    return [
        {"name": name, "description": "d", "input_schema": {"type": "object"}, **draw(_maybe_marker)} for name in names
    ]
