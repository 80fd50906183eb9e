"""The newcomer demo ``agentbus up`` runs on an empty system: the whole agent loop on the bus.

The demo sends one prompt and watches the session: the model worker calls the model (without an API key,
``up`` starts the fake Anthropic-compatible server, whose ``demo`` script plays the tour below: parallel
read-only calls, a Bash command allowed by a rule, a Write, and a Bash command the rules deny), streams
its replies into the bus, ingestion accumulates them and hands the tool calls to the tool workers, whose
results make the normalizer publish the next request, until the model ends its turn. The demo echoes
each request, reply and tool result as it happens.

:func:`scripted_replies` and :func:`stream_events_for` are the tour's replies and their raw stream events,
for tests that play the model's side themselves.
"""

from __future__ import annotations

import asyncio
import contextlib
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson

from agentbus_redis.config.settings import Settings
from agentbus_redis.json_types import JsonObject
from agentbus_redis.messages.content import ContentBlock, TextBlock, ToolUseBlock
from agentbus_redis.messages.kinds import AssistantMessage
from agentbus_redis.sandbox.runner import sandbox_for
from agentbus_redis.sandbox.workspaces import SessionWorkspaces
from agentbus_redis.sdk.client import AgentbusClient, PublishedRequest
from agentbus_redis.sdk.replay import wait_until_persisted
from agentbus_redis.transcript_files.layout import session_file

DEMO_PROMPT = "Take a tour of this workspace and leave me a short note about it."
DEMO_FILES = {
    "README.md": "# demo workspace\n\nA tiny project for the agentbus demo.\n",
    "app.py": 'def greet(name: str) -> str:\n    return f"hello, {name}"\n',
}


def _call(name: str, **tool_input: Any) -> ToolUseBlock:
    return ToolUseBlock(id=f"toolu_{uuid.uuid4().hex[:20]}", name=name, input=tool_input)


def scripted_replies() -> list[list[ContentBlock]]:
    """The model's three turns."""
    return [
        [
            TextBlock(text="I'll look around first: listing files and reading the README and the code."),
            _call("Glob", pattern="**/*"),
            _call("Read", file_path="README.md"),
            _call("Read", file_path="app.py"),
            _call("Bash", command="ls -la", description="List the workspace"),
        ],
        [
            TextBlock(text="Let me write the note, then clean up the build output."),
            _call("Write", file_path="NOTES.md", content="# Notes\n\n- `app.py` defines `greet(name)`.\n"),
            _call("Bash", command="rm -rf build", description="Remove build output"),
        ],
        [TextBlock(text="Done. The workspace has a README and `app.py` (a `greet` function); I wrote NOTES.md.")],
    ]


def stream_events_for(blocks: list[ContentBlock], *, message_id: str, model: str) -> list[JsonObject]:
    """The raw Anthropic stream events a model would send for a reply made of ``blocks``."""
    events: list[JsonObject] = [
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
                "usage": {"input_tokens": 42, "output_tokens": 1},
            },
        }
    ]
    for index, block in enumerate(blocks):
        if isinstance(block, ToolUseBlock):
            start: JsonObject = {"type": "tool_use", "id": block.id, "name": block.name, "input": {}}
            raw = orjson_text(block.input)
            deltas: list[JsonObject] = [
                {"type": "input_json_delta", "partial_json": raw[i : i + 16]} for i in range(0, len(raw), 16)
            ]
        else:
            assert isinstance(block, TextBlock)
            start = {"type": "text", "text": ""}
            deltas = [{"type": "text_delta", "text": block.text[i : i + 24]} for i in range(0, len(block.text), 24)]
        events.append({"type": "content_block_start", "index": index, "content_block": start})
        events += [{"type": "content_block_delta", "index": index, "delta": delta} for delta in deltas]
        events.append({"type": "content_block_stop", "index": index})
    stop_reason = "tool_use" if any(isinstance(b, ToolUseBlock) for b in blocks) else "end_turn"
    events.append(
        {
            "type": "message_delta",
            "delta": {"stop_reason": stop_reason, "stop_sequence": None},
            "usage": {"output_tokens": 57},
        }
    )
    events.append({"type": "message_stop"})
    return events


def orjson_text(value: Any) -> str:
    return orjson.dumps(value).decode()


def prepare_workspace(settings: Settings, session: str) -> Path:
    """The demo files in the session's own workspace (issue 28: a workspace per session), made the way the
    tool worker makes it, so its sandboxed commands may use it."""
    sandbox = sandbox_for(settings.tools)
    workspaces = SessionWorkspaces(
        settings.tools.workspace, settings.tools.workspace_scope, owner=sandbox.owner if sandbox else None
    )
    root = workspaces.for_session(session)
    for name, text in DEMO_FILES.items():
        path = root / name
        if not path.exists():
            path.write_text(text, encoding="utf-8")
    return root


async def run_demo(
    bus: AgentbusClient, settings: Settings, *, echo: Callable[[str], None], timeout_s: float = 120.0
) -> tuple[str, Path, PublishedRequest]:
    """Send the demo prompt and follow the turn until the model ends it; returns the session id, its
    transcript path and the last API request. Raises :class:`DemoFailed` when the turn ends in an API error."""
    session = f"demo-{uuid.uuid4().hex[:8]}"
    prepare_workspace(settings, session)
    echo(f"demo session {session}: user → {DEMO_PROMPT!r}")
    request = await bus.send_prompt_and_wait(session, DEMO_PROMPT, timeout_s=timeout_s)
    watcher = asyncio.create_task(_echo_requests(bus, session, request, echo, timeout_s))
    try:
        async with asyncio.timeout(timeout_s):
            await _follow_turn(bus, session, echo)
    finally:
        watcher.cancel()
        with contextlib.suppress(asyncio.CancelledError, TimeoutError):
            await watcher
    path = await wait_until_persisted(bus, session, settings=settings, timeout_s=timeout_s)
    echo(f"transcript: {path}")
    last = await bus.latest_request(session)
    return session, session_file(settings.data_dir, settings.session_cwd, session), last or request


class DemoFailed(RuntimeError):
    """The demo's turn ended in an API error (the model worker gave up)."""


async def _echo_requests(
    bus: AgentbusClient, session: str, first: PublishedRequest, echo: Callable[[str], None], timeout_s: float
) -> None:
    """One line per API request the normalizer publishes for the session (what the model worker calls with)."""
    request, turn = first, 1
    while True:
        echo(f"request #{turn}: {len(request.request['messages'])} messages, repairs {request.repairs or 'none'}")
        for line in _tool_outcomes(request.request):
            echo(f"  tool result: {line}")
        request = await bus.next_request(session, after_seq=request.seq, timeout_s=timeout_s)
        turn += 1


async def _follow_turn(bus: AgentbusClient, session: str, echo: Callable[[str], None]) -> None:
    """Echo the model's blocks as ingestion logs them; return when its turn ends."""
    async for entry in bus.follow(session):
        message = entry.message
        if not isinstance(message, AssistantMessage):
            continue
        calls = [block for block in message.blocks if isinstance(block, ToolUseBlock)]
        text = " ".join(block.text for block in message.blocks if isinstance(block, TextBlock)).strip()
        if message.is_api_error_message:
            raise DemoFailed(text)
        if calls:
            echo(f"model calls {', '.join(call.name for call in calls)}")
        elif text:
            echo(f"model says: {text[:120]}")
        if message.message.stop_reason not in (None, "tool_use") and not calls:
            return


def _tool_outcomes(request: dict[str, Any]) -> list[str]:
    last = request["messages"][-1]
    lines: list[str] = []
    for block in last.get("content", []) if isinstance(last.get("content"), list) else []:
        if block.get("type") == "tool_result":
            content = block.get("content")
            text = content if isinstance(content, str) else " ".join(c.get("text", "") for c in content or [])
            flag = "error" if block.get("is_error") else "ok"
            lines.append(f"[{flag}] {text.strip().splitlines()[0][:100] if text.strip() else '(empty)'}")
    return lines
