"""The fake model server's state: step queues per session and the requests it received
(workers/model/fake_app.py serves it). Used on the server's event loop only, so it needs no locks."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Final

from agentbus_redis.workers.model.fake_scripts import FallbackScript
from agentbus_redis.workers.model.fake_steps import Ending, HangStep, HttpErrorStep, RecordedRequest, ReplyStep

DEFAULT_KEEP_REQUESTS: Final = 10_000


@dataclass
class FakeModelState:
    """Step queues per session (None = the default queue) and the requests received, the latest
    ``keep_requests`` of them (each holds its whole conversation, so a long demo would otherwise grow
    without bound)."""

    script: FallbackScript
    keep_requests: int = DEFAULT_KEEP_REQUESTS
    queues: dict[str | None, deque[ReplyStep | HttpErrorStep | HangStep]] = field(default_factory=dict)
    received: deque[RecordedRequest] = field(init=False)
    stopping: asyncio.Event = field(default_factory=asyncio.Event)

    def __post_init__(self) -> None:
        self.received = deque(maxlen=self.keep_requests)
        self._an_exchange_ended = asyncio.Event()

    def end(self, record: RecordedRequest, ending: Ending) -> None:
        """Note how ``record``'s exchange ended and wake those waiting for requests to settle."""
        record.ended = ending
        record.ended_at_ms = time.time() * 1000
        self._an_exchange_ended.set()
        self._an_exchange_ended = asyncio.Event()

    async def settled(self, chosen: Callable[[], list[RecordedRequest]], timeout_s: float) -> list[RecordedRequest]:
        """``chosen()`` once none of its requests is still going, or as it is after ``timeout_s``."""
        deadline = asyncio.get_running_loop().time() + timeout_s
        records = chosen()
        while any(r.ended is None for r in records):
            remaining = deadline - asyncio.get_running_loop().time()
            if remaining <= 0:
                break
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._an_exchange_ended.wait(), remaining)
            records = chosen()
        return records

    def next_step(self, session: str | None) -> ReplyStep | HttpErrorStep | HangStep | None:
        for queue_key in (session, None) if session is not None else (None,):
            queue = self.queues.get(queue_key)
            if queue:
                return queue.popleft()
        return None
