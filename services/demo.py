"""The newcomer demo ``agentbus up`` runs on an empty system: a scripted "model" talks to the bus.

The script plays the model's side of one short session: its first reply is *streamed* as raw Anthropic
stream events (accumulated by ingestion into one message per block), the others are sent whole; every
reply carries real tool calls that the tool workers run in the workspace (parallel read-only calls, a
Bash command allowed by a rule, a Write, and a Bash command the rules deny). Between replies the demo waits for the
normalizer's next API request, exactly as a model-calling producer would.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import orjson

from services.client import AgentbusClient, PublishedRequest
from services.replay import wait_until_persisted
from services.runtime.settings import Settings
from services.transcripts.layout import session_file
from shared.content import ContentBlock, TextBlock, ToolUseBlock
from shared.factories import create_assistant_message
from shared.json_types import JsonObject

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


def prepare_workspace(root: Path) -> None:
    root.mkdir(parents=True, exist_ok=True)
    for name, text in DEMO_FILES.items():
        path = root / name
        if not path.exists():
            path.write_text(text, encoding="utf-8")


async def run_demo(
    bus: AgentbusClient, settings: Settings, *, echo: Callable[[str], None], timeout_s: float = 60.0
) -> tuple[str, Path, PublishedRequest]:
    """Play the scripted session; returns its id, its transcript path and the last API request."""
    prepare_workspace(settings.tools.workspace)
    session = f"demo-{uuid.uuid4().hex[:8]}"
    echo(f"demo session {session}: user → {DEMO_PROMPT!r}")
    await bus.send_prompt(session, DEMO_PROMPT)
    seen = 0
    request = await bus.next_request(session, after_seq=seen, timeout_s=timeout_s)
    for turn, blocks in enumerate(scripted_replies(), start=1):
        echo(f"request #{turn}: {len(request.request['messages'])} messages, repairs {request.repairs or 'none'}")
        calls = [b for b in blocks if isinstance(b, ToolUseBlock)]
        summary = ", ".join(f"{c.name}" for c in calls) or "text only"
        if turn == 1:
            request_id = f"req_demo_{uuid.uuid4().hex[:12]}"
            events = stream_events_for(blocks, message_id=f"msg_demo_{turn}", model="claude-demo")
            echo(f"model streams reply {turn} as {len(events)} events ({summary})")
            for event in events:
                await bus.send_stream_event(session, request_id, event)
        else:
            message = create_assistant_message(blocks)
            echo(f"model replies {turn} ({summary})")
            await bus.send_assistant(session, message)
        seen = request.seq
        if calls:
            request = await bus.next_request(session, after_seq=seen, timeout_s=timeout_s)
            for line in _tool_outcomes(request.request):
                echo(f"  tool result: {line}")
    path = await wait_until_persisted(bus, session, settings=settings, timeout_s=timeout_s)
    echo(f"transcript: {path}")
    return session, session_file(settings.data_dir, settings.cwd, session), request


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
