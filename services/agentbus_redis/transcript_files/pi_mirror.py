"""``AGENTBUS_TRANSCRIPT_FORMAT=pi``: each session also as a pi session file (issue 17, P7, P10).

The Claude Code transcript stays the store's source of truth (de-dup, chain, tombstones, torn tails are
all decided there). The pi file ``<sessionId>.pi.jsonl`` beside it is derived from it: a v3 header, then
every transcript line mapped with :class:`agentbus_redis.pi.claude_code.ClaudeCodeToPi`. After each batch the
mirror appends the lines the transcript gained since the byte offset it last mirrored; when a tombstone
removed lines (R6.3), when the transcript shrank, or the first time this process sees the session (after
a restart or a shard takeover) it rewrites the pi file from the whole transcript (atomically). So a crash
between the two writes only delays the pi file until the session's next batch.
"""

from __future__ import annotations

import asyncio
import json
import os
from dataclasses import dataclass, field
from pathlib import Path

from agentbus_redis.pi.claude_code import ClaudeCodeToPi, new_pi_header
from agentbus_redis.pi.session import dump_line
from agentbus_redis.transcript.unicode_text import escape_lone_surrogates
from agentbus_redis.transcript_files.files import write_file_atomically


def pi_session_path(transcript: Path) -> Path:
    """``<sessionId>.pi.jsonl`` beside ``<sessionId>.jsonl``."""
    return transcript.with_name(transcript.name.removesuffix(".jsonl") + ".pi.jsonl")


@dataclass(slots=True)
class _Mirrored:
    offset: int
    """Bytes of the Claude Code transcript already mapped into the pi file (whole lines)."""
    mapping: ClaudeCodeToPi = field(default_factory=ClaudeCodeToPi)


def _objects(data: bytes) -> list[dict[str, object]]:
    objects = []
    for raw in data.splitlines():
        try:
            value = json.loads(raw)
        except ValueError:
            continue  # a line the store's reader reports; the pi file leaves it out
        if isinstance(value, dict):
            objects.append(value)
    return objects


def _pi_lines(mapping: ClaudeCodeToPi, objects: list[dict[str, object]]) -> bytes:
    return "".join(
        escape_lone_surrogates(dump_line(entry)) + "\n" for line in objects for entry in mapping.entries(line)
    ).encode()


class PiMirror:
    """Keeps the pi session files of the sessions this worker writes."""

    def __init__(self) -> None:
        self._sessions: dict[str, _Mirrored] = {}

    async def sync(self, session_id: str, transcript: Path, *, rewrite: bool) -> None:
        await asyncio.to_thread(self._sync, session_id, transcript, rewrite)

    def forget(self, session_ids: list[str]) -> None:
        for session_id in session_ids:
            self._sessions.pop(session_id, None)

    def _sync(self, session_id: str, transcript: Path, rewrite: bool) -> None:
        if not transcript.exists():
            return
        state = self._sessions.get(session_id)
        size = transcript.stat().st_size
        if state is None or rewrite or size < state.offset:
            self._rewrite(session_id, transcript)
            return
        with transcript.open("rb") as source:
            source.seek(state.offset)
            data = source.read()
        complete = data[: data.rfind(b"\n") + 1]
        if not complete:
            return
        text = _pi_lines(state.mapping, _objects(complete))
        fd = os.open(pi_session_path(transcript), os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o600)
        try:
            view = memoryview(text)
            while view:
                view = view[os.write(fd, view) :]
            os.fsync(fd)
        finally:
            os.close(fd)
        state.offset += len(complete)

    def _rewrite(self, session_id: str, transcript: Path) -> None:
        data = transcript.read_bytes()
        complete = data[: data.rfind(b"\n") + 1]
        objects = _objects(complete)
        first = objects[0] if objects else {}
        timestamp, cwd = first.get("timestamp"), first.get("cwd")
        header = new_pi_header(
            session_id,
            timestamp=timestamp if isinstance(timestamp, str) else None,
            cwd=cwd if isinstance(cwd, str) else None,
        )
        state = _Mirrored(offset=len(complete))
        text = (dump_line(header) + "\n").encode() + _pi_lines(state.mapping, objects)
        write_file_atomically(pi_session_path(transcript), text)
        self._sessions[session_id] = state
