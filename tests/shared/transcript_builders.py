"""Small builders for hand-made transcript lines (JSON objects as Claude Code writes them)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

Obj = dict[str, Any]
"""A JSON object as written to a transcript line."""

CLAUDE_CODE_CORPUS = "claude-code"

CORPUS_FILES = [
    "CH-chuan__CommuGraph/ab51623b-c26d-45f5-b98e-f9d0cfa17018.jsonl",
    "CH-chuan__CommuGraph/agent-6f2b8f7b.jsonl",
    "CH-chuan__CommuGraph/agent-773d7508.jsonl",
    "CH-chuan__CommuGraph/agent-9507cef4.jsonl",
    "d-kimuson__claude-code-viewer/1af7fc5e-8455-4414-9ccd-011d40f70b2a.jsonl",
    "d-kimuson__claude-code-viewer/5c0375b4-57a5-4f26-b12d-d022ee4e51b7.jsonl",
    "d-kimuson__claude-code-viewer/agent-test-hash-123.jsonl",
    "daaain__claude-code-log/edge_cases.jsonl",
    "daaain__claude-code-log/representative_messages.jsonl",
    "daaain__claude-code-log/todowrite_examples.jsonl",
    "jazzyalex__agent-sessions/schema_drift.jsonl",
    "jazzyalex__agent-sessions/small.jsonl",
    "jazzyalex__agent-sessions/subagent/0a1b2c3d-4e5f-4061-8071-2a3b4c5d6e7f.jsonl",
    "jazzyalex__agent-sessions/subagent/0a1b2c3d-4e5f-4061-8071-2a3b4c5d6e7f/subagents/agent-a0ad4f44468bdf20d.jsonl",
    "marot__spotter/258c7280-ae70-4798-800f-63464d01a85d.jsonl",
    "marot__spotter/258c7280-ae70-4798-800f-63464d01a85d/subagents/agent-a881341.jsonl",
    "marot__spotter/258c7280-ae70-4798-800f-63464d01a85d/subagents/agent-acompact-fffbd0.jsonl",
    "marot__spotter/ae4a77f8-aedd-4bc1-888f-c94edc91af04/subagents/agent-acompact-946d2b.jsonl",
    "marot__spotter/short.jsonl",
    "marot__spotter/subagent.jsonl",
    "marot__spotter/tool_heavy.jsonl",
    "neilberkman__ccrider/agent-session.jsonl",
    "neilberkman__ccrider/sample.jsonl",
    "simonw__claude-code-transcripts/sample_session.jsonl",
]


def ts(second: int) -> str:
    """A timestamp ``second`` seconds after 2026-01-01T00:00:00Z."""
    minutes, seconds = divmod(second, 60)
    return f"2026-01-01T00:{minutes:02d}:{seconds:02d}.000Z"


def envelope(uuid: str, parent: str | None, second: int, **extra: Any) -> Obj:
    return {
        "parentUuid": parent,
        "isSidechain": False,
        "uuid": uuid,
        "timestamp": ts(second),
        "sessionId": "s1",
        "cwd": "/home/alice/proj",
        **extra,
    }


def user(uuid: str, parent: str | None, content: Any = "hi", *, second: int = 0, **extra: Any) -> Obj:
    return {"type": "user", "message": {"role": "user", "content": content}, **envelope(uuid, parent, second, **extra)}


def assistant(
    uuid: str, parent: str | None, content: Any, *, msg_id: str | None = None, second: int = 0, **extra: Any
) -> Obj:
    payload = {
        "id": msg_id or f"msg_{uuid}",
        "type": "message",
        "role": "assistant",
        "model": "claude-sonnet-4-5",
        "content": content,
        "stop_reason": None,
        "stop_sequence": None,
        "usage": {"input_tokens": 100, "output_tokens": 10, "cache_read_input_tokens": 5},
    }
    return {"type": "assistant", "message": payload, **envelope(uuid, parent, second, **extra)}


def system(uuid: str, parent: str | None, subtype: str, *, second: int = 0, **extra: Any) -> Obj:
    return {"type": "system", "subtype": subtype, "content": subtype, **envelope(uuid, parent, second, **extra)}


def progress(uuid: str, parent: str | None, *, second: int = 0) -> Obj:
    return {"type": "progress", "data": {"type": "hook_progress"}, **envelope(uuid, parent, second)}


def text(value: str) -> Obj:
    return {"type": "text", "text": value}


def tool_use(tool_use_id: str, name: str = "Bash") -> Obj:
    return {"type": "tool_use", "id": tool_use_id, "name": name, "input": {}}


def tool_result(tool_use_id: str, content: Any = "ok") -> Obj:
    return {"type": "tool_result", "tool_use_id": tool_use_id, "content": content}


def jsonl(*objects: Obj) -> str:
    return "".join(json.dumps(obj, separators=(",", ":")) + "\n" for obj in objects)


def corpus_files(corpus_root: Path) -> list[Path]:
    return sorted((corpus_root / CLAUDE_CODE_CORPUS).rglob("*.jsonl"))
