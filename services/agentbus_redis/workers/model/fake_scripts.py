"""What the fake model answers when no step is queued: ``echo`` or the ``demo`` tour.

``echo`` answers one text block ``You said: <last user text>``. ``demo`` plays the model's side of the
newcomer demo (cli/demo.py): turn *k* of the tour when the request already holds *k* assistant turns,
with fresh tool ids each time, so a retried request gets the same turn again; after the tour it echoes.
Both read only the request, so any number of sessions run the tour side by side.
"""

from __future__ import annotations

from typing import Final, Literal

import orjson

from agentbus_redis.json_types import JsonObject, JsonValue
from agentbus_redis.workers.model.fake_steps import ECHO_MARKER, ReplyStep

FallbackScript = Literal["echo", "demo"]
FALLBACK_SCRIPTS: Final[tuple[FallbackScript, ...]] = ("echo", "demo")


def _text(text: str) -> JsonObject:
    return {"type": "text", "text": text}


def _call(name: str, **tool_input: JsonValue) -> JsonObject:
    return {"type": "tool_use", "name": name, "input": dict(tool_input)}


DEMO_TOUR: Final[tuple[tuple[JsonObject, ...], ...]] = (
    (
        _text("I'll look around first: listing files and reading the README and the code."),
        _call("Glob", pattern="**/*"),
        _call("Read", file_path="README.md"),
        _call("Read", file_path="app.py"),
        _call("Bash", command="ls -la", description="List the workspace"),
    ),
    (
        _text("Let me write the note, then clean up the build output."),
        _call("Write", file_path="NOTES.md", content="# Notes\n\n- `app.py` defines `greet(name)`.\n"),
        _call("Bash", command="rm -rf build", description="Remove build output"),
    ),
    (_text("Done. The workspace has a README and `app.py` (a `greet` function); I wrote NOTES.md."),),
)
"""The model's turns of the demo session: parallel read-only calls, a Bash command the rules allow, a
Write, and a Bash command the rules deny; then a closing text."""


def session_of(body: JsonObject) -> str | None:
    """The session a request belongs to: ``session_id`` in the JSON string ``metadata.user_id`` (M1.3)."""
    metadata = body.get("metadata")
    user_id = metadata.get("user_id") if isinstance(metadata, dict) else None
    if not isinstance(user_id, str):
        return None
    try:
        parsed = orjson.loads(user_id)
    except orjson.JSONDecodeError:
        return None
    session = parsed.get("session_id") if isinstance(parsed, dict) else None
    return session if isinstance(session, str) else None


def _messages(body: JsonObject) -> list[JsonObject]:
    messages = body.get("messages")
    return [m for m in messages if isinstance(m, dict)] if isinstance(messages, list) else []


def last_user_text(body: JsonObject) -> str:
    """The text of the latest user message that has any (tool-result-only messages are skipped)."""
    for message in reversed(_messages(body)):
        if message.get("role") != "user":
            continue
        content = message.get("content")
        if isinstance(content, str):
            return content
        blocks = content if isinstance(content, list) else []
        texts = [b["text"] for b in blocks if isinstance(b, dict) and isinstance(b.get("text"), str)]
        if texts:
            return str(texts[-1])
    return ""


def assistant_turns(body: JsonObject) -> int:
    """How many assistant turns the request already holds (a run of assistant messages is one turn)."""
    roles = [message.get("role") for message in _messages(body)]
    return sum(1 for i, role in enumerate(roles) if role == "assistant" and (i == 0 or roles[i - 1] != "assistant"))


def echo_step(body: JsonObject) -> ReplyStep:
    return ReplyStep(content=[_text(f"You said: {last_user_text(body)}")], stop_reason="end_turn")


def demo_step(body: JsonObject) -> ReplyStep:
    turn = assistant_turns(body)
    if turn >= len(DEMO_TOUR):
        return echo_step(body)
    return ReplyStep(content=[dict(block) for block in DEMO_TOUR[turn]])


def fallback_step(script: FallbackScript, body: JsonObject) -> ReplyStep:
    return demo_step(body) if script == "demo" else echo_step(body)


def with_echo(step: ReplyStep, body: JsonObject) -> ReplyStep:
    """``step`` with :data:`ECHO_MARKER` in its text blocks replaced by the last user text."""
    if not any(block.get("type") == "text" and ECHO_MARKER in str(block.get("text")) for block in step.content):
        return step
    said = last_user_text(body)
    content = [
        {**block, "text": str(block["text"]).replace(ECHO_MARKER, said)} if block.get("type") == "text" else block
        for block in step.content
    ]
    return step.model_copy(update={"content": content})
