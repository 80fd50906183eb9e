"""kill -9 durability: every line the store acknowledged as durable survives a SIGKILL of the writer.

The writer (``kill9_writer.py``) records batches from four concurrent tasks and prints ``ACK <uuid>``
only after ``TranscriptStore.record`` returned. The test kills it mid-stream, reloads the file and checks
that every acknowledged message is there and well-formed; a torn, unacknowledged tail may exist and
must be reported by the next writer (saved to ``.torn``), never crash it.
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from agentbus_redis.messages.factories import create_user_message
from agentbus_redis.messages.kinds import UserMessage
from agentbus_redis.transcript.reader import read_transcript
from agentbus_redis.transcript_files.lines import SessionStamp
from agentbus_redis.transcript_files.store import StoreConfig, TranscriptStore
from agentbus_redis.transcript_files.tail_recovery import TornTail, torn_sidecar

REPO_ROOT = Path(__file__).resolve().parents[2]
WRITER = Path(__file__).with_name("kill9_writer.py")
SESSION_ID = "kill9-session"
CWD = "/kill9/project"


def _run_and_kill(root: Path, acks_before_kill: int) -> tuple[Path, set[str]]:
    """Start the writer, SIGKILL it after ``acks_before_kill`` acknowledgements; return the session
    path and every uuid it acknowledged (including ACKs still in the pipe when it died)."""
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}
    process = subprocess.Popen(
        [sys.executable, str(WRITER), str(root)], stdout=subprocess.PIPE, env=env, cwd=REPO_ROOT, text=True
    )
    assert process.stdout is not None
    header = process.stdout.readline()
    assert header.startswith("PATH "), header
    path = Path(header.removeprefix("PATH ").strip())
    acked: set[str] = set()
    try:
        while len(acked) < acks_before_kill:
            line = process.stdout.readline()
            assert line, f"writer exited early with {process.poll()}"
            acked.add(line.split()[1])
        process.send_signal(signal.SIGKILL)
        acked.update(line.split()[1] for line in process.stdout.read().splitlines() if line.startswith("ACK "))
    finally:
        process.kill()
        process.wait()
    assert process.returncode == -signal.SIGKILL
    return path, acked


@pytest.mark.parametrize("acks_before_kill", [40, 157, 401])
def test_kill9_keeps_every_acknowledged_line(tmp_path: Path, acks_before_kill: int) -> None:
    path, acked = _run_and_kill(tmp_path, acks_before_kill)

    parse = read_transcript(path.read_bytes())
    on_disk = {numbered.line.uuid for numbered in parse.lines if isinstance(numbered.line, UserMessage)}
    assert acked <= on_disk, f"{len(acked - on_disk)} acknowledged line(s) lost"
    # Only the very last line may be damaged, and only as an unterminated (torn) write.
    for error in parse.errors:
        assert error.torn, f"line {error.line_number} malformed in the middle of the file"
        assert error.line_number == parse.line_count

    # The next writer reports the torn tail (if the kill cut one), keeps it in .torn, and continues.
    reported: list[TornTail] = []

    async def resume() -> None:
        store = TranscriptStore(
            tmp_path, StoreConfig(stamp=SessionStamp(git_branch=None)), on_torn_tail=reported.append
        )
        again = [create_user_message("after restart")]
        result = await store.record(SESSION_ID, again, cwd=CWD, continue_chain=True)
        assert result.written == (again[0].uuid,)
        await store.close()

    asyncio.run(resume())
    assert len(reported) == (1 if parse.torn_tail else 0)
    if parse.torn_tail:
        assert torn_sidecar(path).exists()
    reread = read_transcript(path.read_bytes())
    assert reread.errors == ()
    assert acked <= {numbered.line.uuid for numbered in reread.lines if isinstance(numbered.line, UserMessage)}
