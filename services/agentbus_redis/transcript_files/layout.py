"""Where transcripts live on disk: Claude Code's ``projects/`` layout (R7.1).

``<root>/projects/<sanitize_path(cwd)>/<sessionId>.jsonl`` for a main session and
``<root>/projects/<sanitize_path(cwd)>/<sessionId>/subagents[/<subdir>]/agent-<agentId>.jsonl`` (plus an
``agent-<agentId>.meta.json`` sidecar) for a sub-agent. ``root`` plays the part of ``$CLAUDE_CONFIG_DIR``
(agentbus: ``AGENTBUS_DATA_DIR``); pointing it at ``~/.claude`` reads and writes Claude Code's own files.
``<sessionId>`` is the session's Claude Code UUID (:func:`agentbus_redis.session_ids.claude_session_id`: the bus id
itself when it is a UUID), so ``claude --resume <uuid>`` run in ``cwd`` finds the file.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

from agentbus_redis.json_types import JsonObject
from agentbus_redis.session_ids import check_session_id, claude_session_id
from agentbus_redis.transcript_files.files import write_file_atomically

PROJECTS_DIR = "projects"
MAX_SANITIZED_LENGTH = 200
"""R7.1: a project directory name longer than this is cut and suffixed with a hash."""

_NOT_ALNUM = re.compile(r"[^A-Za-z0-9]")
_BASE36 = "0123456789abcdefghijklmnopqrstuvwxyz"


def _utf16_units(text: str) -> list[int]:
    """The UTF-16 code units of ``text`` (JavaScript strings are indexed by these)."""
    data = text.encode("utf-16-le", "surrogatepass")
    return [int.from_bytes(data[i : i + 2], "little") for i in range(0, len(data), 2)]


def djb2_hash(text: str) -> int:
    """The signed 32-bit ``((h << 5) - h + unit) | 0`` hash over UTF-16 code units.

    Claude Code's spec (R7.1) only says "a base-36 hash". This is the ``djb2Hash`` that
    ``sessionStoragePortable`` uses under Node (public source mirrors of v2.1.x); the Bun-compiled
    native binary uses ``Bun.hash`` (wyhash) instead, so for cwds over 200 characters a directory made
    by that build has a different suffix. The function is stable across processes and versions.
    """
    value = 0
    for unit in _utf16_units(text):
        value = ((value << 5) - value + unit) & 0xFFFFFFFF
    return value - (1 << 32) if value >= 1 << 31 else value


def _to_base36(value: int) -> str:
    if value == 0:
        return "0"
    digits = ""
    while value:
        value, remainder = divmod(value, 36)
        digits = _BASE36[remainder] + digits
    return digits


def sanitize_path(cwd: str) -> str:
    """R7.1: every character outside ``[A-Za-z0-9]`` becomes ``-``; over 200 characters → the first 200
    plus ``-`` plus ``abs(djb2_hash(cwd))`` in base 36 (see :func:`djb2_hash` for the caveat).

    Like JavaScript's regex replace, a character outside the BMP (two UTF-16 units) becomes ``--``.
    """
    sanitized = _NOT_ALNUM.sub(lambda match: "--" if ord(match.group()) > 0xFFFF else "-", cwd)
    if len(sanitized) <= MAX_SANITIZED_LENGTH:
        return sanitized
    return f"{sanitized[:MAX_SANITIZED_LENGTH]}-{_to_base36(abs(djb2_hash(cwd)))}"


def project_dir(root: Path, cwd: str) -> Path:
    """``<root>/projects/<sanitize_path(cwd)>``."""
    return root / PROJECTS_DIR / sanitize_path(cwd)


def session_file(root: Path, cwd: str, session_id: str) -> Path:
    """R7.1: the main transcript ``<projects>/<projectDir>/<uuid>.jsonl`` (the session's Claude Code UUID)."""
    return project_dir(root, cwd) / f"{claude_session_id(session_id)}.jsonl"


def legacy_session_file(root: Path, cwd: str, session_id: str) -> Path:
    """Where agentbus before issue 26 wrote a session: named by the bus id itself (a session already there
    keeps growing there; Claude Code cannot resume it unless the id is a UUID)."""
    return project_dir(root, cwd) / f"{check_session_id(session_id)}.jsonl"


def subagent_dir(root: Path, cwd: str, session_id: str, subdir: str | None = None) -> Path:
    """``<projects>/<projectDir>/<sessionId>/subagents[/<subdir>]``."""
    base = project_dir(root, cwd) / claude_session_id(session_id) / "subagents"
    if subdir is None:
        return base
    _check_component("subdir", subdir)
    return base / subdir


def subagent_file(root: Path, cwd: str, session_id: str, agent_id: str, subdir: str | None = None) -> Path:
    """R7.1: a sub-agent transcript ``…/<sessionId>/subagents[/<subdir>]/agent-<agentId>.jsonl``."""
    _check_component("agent id", agent_id)
    return subagent_dir(root, cwd, session_id, subdir) / f"agent-{agent_id}.jsonl"


def subagent_meta_file(transcript: Path) -> Path:
    """The ``agent-<agentId>.meta.json`` sidecar beside a sub-agent transcript."""
    return transcript.with_name(transcript.name.removesuffix(".jsonl") + ".meta.json")


def subagent_meta(agent_type: str, *, worktree_path: str | None = None, description: str | None = None) -> JsonObject:
    """R7.1: the sidecar object ``{agentType, worktreePath?, description?}``."""
    meta: JsonObject = {"agentType": agent_type}
    if worktree_path is not None:
        meta["worktreePath"] = worktree_path
    if description is not None:
        meta["description"] = description
    return meta


def write_subagent_meta(transcript: Path, meta: JsonObject) -> Path:
    """Write the sidecar atomically with mode 0600 in a 0700 directory (R7.2)."""
    target = subagent_meta_file(transcript)
    write_file_atomically(target, json.dumps(meta, separators=(",", ":"), ensure_ascii=False).encode("utf-8"))
    return target


def _check_component(what: str, value: str) -> None:
    """Ids become file names: refuse anything that would escape the directory."""
    if not value or value in {".", ".."} or "/" in value or "\\" in value or "\0" in value:
        msg = f"invalid {what} for a transcript path: {value!r}"
        raise ValueError(msg)
