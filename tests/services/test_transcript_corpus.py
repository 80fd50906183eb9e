"""The real corpus through the store: writing a loaded file back reproduces every line (equal JSON), and
the store's own files load and resume like Claude Code's."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from agentbus_redis.clock import FixedClock
from agentbus_redis.ids import SequentialIds
from agentbus_redis.transcript import read_transcript, resume_session, verify_transcript
from agentbus_redis.transcript_files.lines import SessionStamp
from agentbus_redis.transcript_files.store import StoreConfig, TranscriptStore
from tests.conftest import CORPUS_ROOT, corpus_cases

CORPUS_FILES = corpus_cases("claude-code")


def _name(path: Path) -> str:
    return str(path.relative_to(CORPUS_ROOT / "claude-code"))


@pytest.mark.parametrize("source", CORPUS_FILES, ids=_name)
async def test_write_back_reproduces_every_loaded_line(tmp_path: Path, corpus_root: Path, source: Path) -> None:
    parse = read_transcript(source.read_bytes())
    store = TranscriptStore(tmp_path, StoreConfig(stamp=SessionStamp(git_branch=None)))
    target = tmp_path / "projects" / "copy" / source.name
    assert await store.write_lines(target, parse.entries) == len(parse.lines)
    await store.close()
    written = target.read_text(encoding="utf-8").splitlines()
    assert len(written) == len(parse.lines)
    for numbered, line in zip(parse.lines, written, strict=True):
        assert json.loads(line) == json.loads(numbered.raw), f"{_name(source)} line {numbered.line_number}"


def test_corpus_is_present(corpus_root: Path) -> None:
    assert len(CORPUS_FILES) >= 20


async def test_store_written_session_resumes_and_verifies(tmp_path: Path, corpus_root: Path) -> None:
    """Re-recording a resumed corpus chain through the store (as a fork, R7.21) yields a file that
    verifies clean and resumes to the same messages."""
    source = corpus_root / "claude-code" / "marot__spotter" / "tool_heavy.jsonl"
    resumed = resume_session(source.read_bytes(), clock=FixedClock(), ids=SequentialIds())
    store = TranscriptStore(tmp_path, StoreConfig(stamp=SessionStamp(git_branch=None)))
    result = await store.record("fork", resumed.messages, cwd="/fork")
    again = await store.record("fork", resumed.messages, cwd="/fork")
    await store.close()
    assert again.written == ()
    data = result.path.read_bytes()
    assert verify_transcript(read_transcript(data)).ok
    reloaded = resume_session(data, clock=FixedClock(), ids=SequentialIds())
    assert [message.uuid for message in reloaded.messages] == [message.uuid for message in resumed.messages]
