"""TranscriptStore opens sessions concurrently: each session once, the R7.7 de-dup set and chain tail
read from its file (R7.7 step 1), and a failed open retried by the next caller."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any

import pytest

from agentbus_redis.messages.factories import create_user_message
from agentbus_redis.transcript_files.lines import SessionStamp
from agentbus_redis.transcript_files.store import StoreConfig, TranscriptStore

CWD = "/home/alice/proj"
CONFIG = StoreConfig(stamp=SessionStamp(entrypoint="cli", git_branch=None))


def _lines(path: Path) -> list[dict[str, object]]:
    return [json.loads(line) for line in path.read_text().splitlines()]


async def test_r7_7_many_new_sessions_open_concurrently(tmp_path: Path) -> None:
    """Fifty first records at once: every session gets its own file with its one line."""
    store = TranscriptStore(tmp_path, CONFIG)
    messages = [create_user_message(f"hello {n}") for n in range(50)]
    results = await asyncio.gather(
        *(store.record(f"s{n}", [message], cwd=CWD, continue_chain=True) for n, message in enumerate(messages))
    )
    assert sorted(store.cached_sessions()) == sorted(f"s{n}" for n in range(50))
    for n, result in enumerate(results):
        assert [line["uuid"] for line in _lines(result.path)] == [messages[n].uuid]
    await store.close()


async def test_r7_8_concurrent_records_of_one_new_session_share_one_open(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Concurrent first records of one session: one state, every message once, chained in call order."""
    store = TranscriptStore(tmp_path, CONFIG)
    opened: list[str] = []
    original = store._open_session

    def counting(session_id: str, cwd: str) -> Any:
        opened.append(session_id)
        return original(session_id, cwd)

    monkeypatch.setattr(store, "_open_session", counting)
    messages = [create_user_message(f"m{n}") for n in range(10)]
    results = await asyncio.gather(
        *(store.record("s1", [message], cwd=CWD, continue_chain=True) for message in messages)
    )
    assert opened == ["s1"]
    lines = _lines(results[0].path)
    assert [line["uuid"] for line in lines] == [message.uuid for message in messages]
    assert [line["parentUuid"] for line in lines] == [None, *(message.uuid for message in messages[:-1])]
    await store.close()


async def test_r7_7_existing_file_read_on_open_and_failed_open_retried(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A session written by an earlier store is de-duplicated against its file; an open that fails is
    retried by the caller that waited for it."""
    first = TranscriptStore(tmp_path, CONFIG)
    old = create_user_message("before restart")
    await first.record("s1", [old], cwd=CWD, continue_chain=True)
    await first.close()

    store = TranscriptStore(tmp_path, CONFIG)
    original = store._open_session
    failures = [OSError("disk hiccup")]

    def flaky(session_id: str, cwd: str) -> Any:
        if failures:
            raise failures.pop()
        return original(session_id, cwd)

    monkeypatch.setattr(store, "_open_session", flaky)
    new = create_user_message("after restart")
    outcomes = await asyncio.gather(
        store.record("s1", [old], cwd=CWD, continue_chain=True),
        store.record("s1", [new], cwd=CWD, continue_chain=True),
        return_exceptions=True,
    )
    assert isinstance(outcomes[0], OSError)
    assert not isinstance(outcomes[1], BaseException)
    lines = _lines(outcomes[1].path)
    assert [line["uuid"] for line in lines] == [old.uuid, new.uuid]
    assert lines[1]["parentUuid"] == old.uuid
    await store.close()
