"""One writer per session file (``session_lock.py``): a store that opens a session another store (another
process: a previous shard owner woken from a pause) still holds waits for it, then reads the file after
taking the lock — R7.7 de-dup and R7.8 parents stay exact across the hand-over."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from agentbus_redis.transcript_files.errors import TranscriptSessionBusy
from agentbus_redis.transcript_files.session_lock import LOCKS_DIR, SessionLock
from agentbus_redis.transcript_files.store import StoreConfig, TranscriptStore
from tests.services.test_transcript_store import CWD, SESSION, STAMP, assistant, lines_of, parents, user


async def test_second_writer_waits_then_continues_the_first_writers_file(tmp_path: Path) -> None:
    old_owner = TranscriptStore(tmp_path, StoreConfig(stamp=STAMP))
    new_owner = TranscriptStore(tmp_path, StoreConfig(stamp=STAMP))
    path = (await old_owner.record(SESSION, [user("U0"), assistant("A1")], cwd=CWD)).path
    # The next owner's batch is the same history plus one new message (a redelivered log).
    taking_over = asyncio.create_task(
        new_owner.record(SESSION, [user("U0"), assistant("A1"), user("U2"), assistant("A3")], cwd=CWD)
    )
    await asyncio.sleep(0.2)
    assert not taking_over.done()  # blocked on the old owner's lock
    # The old owner, woken from its pause, still appends the batch it held.
    await old_owner.record(SESSION, [user("U0"), assistant("A1"), user("U2")], cwd=CWD, continue_chain=True)
    await old_owner.forget([SESSION])  # it noticed the lost lease
    result = await asyncio.wait_for(taking_over, 10)
    await new_owner.close()
    assert result.written == ("A3",)
    assert result.skipped == ("U0", "A1", "U2")
    assert [line["uuid"] for line in lines_of(path)] == ["U0", "A1", "U2", "A3"]  # exactly once per uuid
    assert parents(path) == {"U0": None, "A1": "U0", "U2": "A1", "A3": "U2"}


async def test_writer_gives_up_after_the_lock_timeout(tmp_path: Path) -> None:
    holder = TranscriptStore(tmp_path, StoreConfig(stamp=STAMP))
    waiter = TranscriptStore(tmp_path, StoreConfig(stamp=STAMP, lock_timeout_s=0.1))
    path = (await holder.record(SESSION, [user("U0")], cwd=CWD)).path
    with pytest.raises(TranscriptSessionBusy) as raised:
        await waiter.record(SESSION, [user("U0"), user("X1")], cwd=CWD)
    assert raised.value.path.parent.name == LOCKS_DIR
    await holder.close()
    assert [line["uuid"] for line in lines_of(path)] == ["U0"]
    # Once released, the session opens normally.
    assert (await waiter.record(SESSION, [user("U0"), user("X1")], cwd=CWD)).written == ("X1",)
    await waiter.close()


def test_lock_files_stay_out_of_claude_codes_projects_layout(tmp_path: Path) -> None:
    lock = SessionLock.acquire(tmp_path, "abc")
    assert lock.path == tmp_path / LOCKS_DIR / "abc.lock"
    assert not (tmp_path / "projects").exists()
    lock.release()
    lock.release()  # idempotent
    assert not lock.held
