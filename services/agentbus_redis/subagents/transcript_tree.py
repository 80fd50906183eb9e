"""The sub-agent transcripts of a session file (A4.1): ``<dir>/<session>/subagents[/<subdir>]/agent-*.jsonl``
beside ``<dir>/<session>.jsonl``."""

from __future__ import annotations

from pathlib import Path


def subagent_files(session_file: Path) -> list[Path]:
    """The sub-agent transcripts of ``session_file``, sorted (none when it has no ``subagents`` directory)."""
    base = session_file.with_suffix("") / "subagents"
    if not base.is_dir():
        return []
    return sorted(path for path in base.rglob("agent-*.jsonl") if path.is_file())
