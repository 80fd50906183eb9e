"""The ingestion worker's side of sub-agents: what it calls, per batch, so children and parents hear of
each other (see ``relay.py``).

- ``observe`` (per applied ingress entry): collects the log entries of child sessions, the parents
  whose ``user_cancel`` interrupt reached running tools (A8.2; an ``interrupt`` — the user typing a new
  message — leaves ``Agent`` calls running: their interrupt behaviour is ``block``), and the children
  interrupted themselves (A8.1: an interrupted child ends its parent's call, even one idle between calls,
  whose log gets no interrupt text).
- ``write`` (inside the batch's atomic script): the parent's cancel marker, in the parent's slot, so a
  cancellation survives a crash right after the commit (the sweep reads it).
- ``settled`` (after the commit): relays the children's entries and cancels the children of interrupted
  parents, in a background task (other slots, other shards).
"""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from typing import Any

import structlog

from agentbus_redis.agents.ids import is_child_session
from agentbus_redis.bus.events import IngressPayload, Interrupt, LogEntry
from agentbus_redis.bus.ledger import LedgerOutput
from agentbus_redis.runtime.key_calls import KeyCalls
from agentbus_redis.subagents.relay import ChildRelay, child_entries_by_session
from agentbus_redis.subagents.store import AgentKeys

log = structlog.get_logger(__name__)

CANCEL_MARKER_TTL_MS = 24 * 3600 * 1000


class AgentBatch:
    """One ingestion batch's agent work."""

    def __init__(self, hooks: IngestionAgentHooks | None) -> None:
        self._hooks = hooks
        self._entries: list[LogEntry] = []
        self._cancels: dict[str, int] = {}
        self._interrupted_children: list[str] = []

    def observe(self, session_id: str, payload: IngressPayload, out: LedgerOutput, *, at_ms: int) -> None:
        if self._hooks is None:
            return
        if out.entries and is_child_session(session_id):
            self._entries.extend(out.entries)
        # The class itself (payload classes have no subclasses): a failing isinstance against a pydantic model
        # costs ~0.25 µs, and this runs for every entry.
        if type(payload) is Interrupt and payload.reason == "user_cancel":
            if out.interrupt_tools:
                self._cancels[session_id] = at_ms
            if is_child_session(session_id):
                self._interrupted_children.append(session_id)

    def write(self, calls: KeyCalls) -> None:
        if self._hooks is None:
            return
        for session_id, at_ms in self._cancels.items():
            calls.add("SET", self._hooks.keys.cancel(session_id), at_ms, "PX", CANCEL_MARKER_TTL_MS)

    def settled(self) -> None:
        if self._hooks is not None and (self._entries or self._cancels or self._interrupted_children):
            self._hooks.spawn(self._relay())

    async def _relay(self) -> None:
        assert self._hooks is not None
        relay = self._hooks.relay
        for parent, at_ms in self._cancels.items():
            await relay.cancel_children(parent, interrupted_at_ms=at_ms)
        for child, entries in child_entries_by_session(self._entries).items():
            await relay.on_child_entries(child, entries)
        for child in self._interrupted_children:
            await relay.on_child_interrupted(child)


class IngestionAgentHooks:
    """Owned by the ingestion worker; one :class:`AgentBatch` per batch. Batches are relayed one after
    another, in commit order: a child's progress must reach its parent before the child's result (a
    progress message for an answered call is dropped as stale)."""

    def __init__(self, relay: ChildRelay) -> None:
        self.relay = relay
        self.keys = AgentKeys(relay.topology)
        self._queue: asyncio.Queue[Coroutine[Any, Any, None]] = asyncio.Queue()
        self._runner: asyncio.Task[None] | None = None

    def batch(self) -> AgentBatch:
        return AgentBatch(self)

    def spawn(self, work: Coroutine[Any, Any, None]) -> None:
        self._queue.put_nowait(work)
        if self._runner is None or self._runner.done():
            self._runner = asyncio.get_running_loop().create_task(self._run(), name="agent-relay")

    async def _run(self) -> None:
        while not self._queue.empty():
            work = self._queue.get_nowait()
            try:
                await work
            except Exception:  # the sweep retries what a failed relay left undone
                log.exception("agent_relay_failed")
            finally:
                self._queue.task_done()

    async def in_order(self, work: Coroutine[Any, Any, int]) -> int:
        """Run ``work`` (a sweep) after the relays queued so far: a sweep that read a child's final reply
        must not answer the parent before the relay has forwarded the child's earlier progress."""
        result: asyncio.Future[int] = asyncio.get_running_loop().create_future()

        async def run() -> None:
            try:
                result.set_result(await work)
            except Exception as error:
                result.set_exception(error)

        self.spawn(run())
        return await result

    async def drain(self) -> None:
        """Wait for the relays queued so far (tests; shutdown)."""
        await self._queue.join()
