"""Writer process for the kill -9 durability test (run as a script, never collected by pytest).

Usage: ``python kill9_writer.py DATA_ROOT``. Several concurrent tasks record batches of user messages of
varying size into one session through :class:`TranscriptStore`; after ``record`` returns (the batch is
durable) the task prints ``ACK <uuid>`` for each message of the batch. The test SIGKILLs this process at
a random moment and checks the file against the acknowledgements.
"""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

from agentbus_redis.ids import random_uuid
from agentbus_redis.messages.factories import create_user_message
from agentbus_redis.transcript_files.lines import SessionStamp
from agentbus_redis.transcript_files.store import StoreConfig, TranscriptStore

SESSION_ID = "kill9-session"
CWD = "/kill9/project"
TASKS = 4


async def _lane(store: TranscriptStore, lane: int) -> None:
    round_number = 0
    while True:
        size = 1 + (round_number + lane) % 4
        # Some messages are large (hundreds of KiB) so a kill often lands inside a write.
        padding = "x" * (50_000 * ((round_number * 7 + lane) % 9))
        batch = [
            create_user_message(f"lane {lane} round {round_number} item {index} {padding}", ids=random_uuid)
            for index in range(size)
        ]
        await store.record(SESSION_ID, batch, cwd=CWD, continue_chain=True)
        sys.stdout.write("".join(f"ACK {message.uuid}\n" for message in batch))
        sys.stdout.flush()
        round_number += 1


async def main(root: Path) -> None:
    store = TranscriptStore(root, StoreConfig(stamp=SessionStamp(git_branch=None)))
    sys.stdout.write(f"PATH {store.session_path(SESSION_ID, CWD)}\n")
    sys.stdout.flush()
    await asyncio.gather(*(_lane(store, lane) for lane in range(TASKS)))


if __name__ == "__main__":
    asyncio.run(main(Path(sys.argv[1])))
