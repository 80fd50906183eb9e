"""Publishing one model call's output into its session's ingress shard, in order.

Raw stream events go out as they arrive: the first event of a burst is written at once (time to first
token matters), and the events that arrive while that write is in flight go together in the next one. A
write is one atomic script (``key_calls.py``): a batch of ``XADD``s, plus, for the reply's last batch, the
in-flight record that says the request was answered (so a worker that takes the request over after a crash
knows not to call again). Every entry is signed with the worker secret (``bus/internal_events.py``) and
has a deterministic idempotency key, so a republished entry is applied once. With a fence (the session's
call lease and its token) every write runs only while the lease holds the token; a refused write raises
:class:`~agentbus_redis.workers.model.session_lease.SessionLeaseLost` (nothing of it was written).

A reply reaches the log complete and in order, or the call is abandoned whole (agent-loop.md M5, issue 25):
a write that fails (a connection that died with a restarting Redis) is written again, the same entries with
the same idempotency keys (ingestion applies an entry once, so a write that landed before its reply was lost
is harmless), with a backoff, until it lands or ``retry_s`` has passed. Nothing queued after it is written
before it. A write that never lands fails the publisher for good (:class:`PublishFailed`): every later
``add_event``/``publish`` raises, so the call stops and its notice stays pending; the in-flight record still
says "streaming", and whoever serves the notice next tombstones what landed and calls the model again.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable

import orjson
import redis.asyncio as aioredis
import structlog

from agentbus_redis.bus.events import SCHEMA_VERSION, IngressEnvelope, IngressPayload
from agentbus_redis.bus.internal_events import AUTH_FIELD, internal_event_proof
from agentbus_redis.json_types import JsonObject
from agentbus_redis.runtime.codec import DATA_FIELD, signed_entry_fields
from agentbus_redis.runtime.key_calls import Fenced, KeyCalls
from agentbus_redis.streams.topology import Topology
from agentbus_redis.workers.model.session_lease import SessionLeaseLost

log = structlog.get_logger(__name__)

Fields = dict[str, bytes]

PUBLISH_RETRY_S = 30.0
"""How long a failed write is retried before the call is abandoned (a Redis restart takes seconds)."""
PUBLISH_BACKOFF_INITIAL_S = 0.05
PUBLISH_BACKOFF_MAX_S = 1.0


class PublishFailed(Exception):
    """A write of the call's entries did not land within the bound: the call is abandoned (module docstring). Not an
    ``OSError``: the retry loop of the model call (M4) must never take it for a failure of the API."""

    def __init__(self, session_id: str, error: BaseException) -> None:
        super().__init__(f"session {session_id}: entries could not be written: {error!r}")
        self.session_id = session_id
        self.error = error


TRANSIENT_WRITE_ERRORS: tuple[type[BaseException], ...] = (aioredis.ConnectionError, aioredis.TimeoutError, OSError)
"""A write that failed with one of these may land when written again (redis-py's ``BusyLoadingError``, the
server loading its AOF after a restart, is a ``ConnectionError``; a ``ReadOnlyError`` during a failover too)."""


class SessionPublisher:
    """Writes the entries of one session's model call to its ingress (see the module docstring)."""

    def __init__(
        self,
        redis: aioredis.Redis,
        topology: Topology,
        *,
        session_id: str,
        request_seq: int,
        internal_key: bytes,
        traceparent: str | None,
        request_digest: str | None = None,
        fence: tuple[str, str] | None = None,
        retry_s: float = PUBLISH_RETRY_S,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
    ) -> None:
        self.redis = redis
        self.topology = topology
        self.session_id = session_id
        self.request_seq = request_seq
        self.internal_key = internal_key
        self.traceparent = traceparent
        self.request_digest = request_digest
        """Carried by every in-flight record (``worker.answered_already``)."""
        self.fence = fence
        """(lease key, token): every write runs only while the key holds the token (module docstring)."""
        self.ingress = topology.ingress_for(session_id)
        self.inflight_key = topology.model_inflight(session_id)
        self.retry_s = retry_s
        self.sleep = sleep
        self.write_retries = 0
        """Writes that failed and were written again (each counted once per failed attempt)."""
        self._pending: list[Fields] = []
        self._writer: asyncio.Task[None] | None = None
        self._failure: BaseException | None = None
        self._record: bytes | None = None
        self._unsent = False
        self.published = 0

    def fresh(self) -> SessionPublisher:
        """A publisher of the same call (session, request, fence) that has written nothing and failed nothing:
        what ends the turn after this one gave up (``ModelCall.end_abandoned``)."""
        return SessionPublisher(
            self.redis,
            self.topology,
            session_id=self.session_id,
            request_seq=self.request_seq,
            internal_key=self.internal_key,
            traceparent=self.traceparent,
            request_digest=self.request_digest,
            fence=self.fence,
            retry_s=self.retry_s,
            sleep=self.sleep,
        )

    # -- stream events: written behind the stream -------------------------------------------------

    def record(self, state: JsonObject) -> None:
        """Set the in-flight record to ``state`` in the next write, atomically with the events queued with it
        (the record of a stream goes out with its first event; "answered" with its ``message_stop``)."""
        self._record = orjson.dumps({**state, "digest": self.request_digest} if self.request_digest else state)

    def add_event(
        self,
        request_id: str,
        index: int,
        event: JsonObject,
        *,
        max_tokens: int | None = None,
        withhold_stop_error: bool = False,
    ) -> None:
        """Queue raw event number ``index`` of ``request_id``; it is written now if no write is in flight."""
        fields = self.stream_event_fields(
            request_id, index, event, max_tokens=max_tokens, withhold_stop_error=withhold_stop_error
        )
        self._queue(fields)

    def add_entry(self, key: str, payload: IngressPayload) -> None:
        """Queue a whole entry behind the events queued so far: written in the same write as the last of them
        when no write is in flight in between (e.g. the M8.5 resumption with its reply's ``message_stop``)."""
        self._queue(self._fields(key, payload))

    @property
    def failed(self) -> BaseException | None:
        """What stopped this publisher for good (a lost lease, or :class:`PublishFailed`), if anything."""
        return self._failure

    def _queue(self, fields: Fields) -> None:
        if self._failure is not None:
            raise self._failure  # stop reading a stream whose events can no longer be written (never a gap)
        self._pending.append(fields)
        if self._writer is None or self._writer.done():
            self._writer = asyncio.create_task(self._write_pending())
            self._unsent = True

    async def send_started(self) -> None:
        """Let a write just started go out now. The stream's reader calls this after each event: the SDK parses
        the events already received without giving the event loop a turn, so a write task started at the first
        event of a burst would otherwise wait behind the whole burst (tens of ms of parsing: TTFT, issue 31).
        One turn per write started, not per event."""
        if self._unsent:
            self._unsent = False
            await asyncio.sleep(0)

    def stream_event_fields(
        self,
        request_id: str,
        index: int,
        event: JsonObject,
        *,
        max_tokens: int | None = None,
        withhold_stop_error: bool = False,
    ) -> Fields:
        """The signed entry of one stream event: the JSON ``IngressEnvelope(payload=StreamEvent(…))`` dumps to,
        built directly (a fifth of the cost of validating the event into the models and dumping them again; the
        event is the SDK's parsed JSON already). ``tests/services/test_model_publisher.py`` holds it equal."""
        payload: JsonObject = {
            "type": "stream_event",
            "request_id": request_id,
            "event": event,
            "request_seq": self.request_seq,
        }
        if max_tokens is not None:
            payload["max_tokens"] = max_tokens
        if withhold_stop_error:
            payload["withhold_stop_error"] = True
        data = orjson.dumps(
            {
                "v": SCHEMA_VERSION,
                "session_id": self.session_id,
                "idempotency_key": f"model:{request_id}:{index}",
                "payload": payload,
                "traceparent": self.traceparent,
            }
        )
        return {DATA_FIELD: data, AUTH_FIELD: internal_event_proof(self.internal_key, data)}

    async def _write_pending(self) -> None:
        while self._pending:
            batch, self._pending = self._pending, []
            calls = KeyCalls()
            if self._record is not None:
                calls.add("SET", self.inflight_key, self._record)
                self._record = None
            for fields in batch:
                calls.add_xadd(self.ingress, fields)
            try:
                await self._write(calls)
            except BaseException as error:
                self._failure = error
                self._pending = []
                raise
            self.published += len(batch)

    async def drain(self) -> None:
        """Wait until every queued event is written; raises what a write raised."""
        if self._writer is not None:
            with contextlib.suppress(Exception):
                await asyncio.shield(self._writer)
        if self._failure is not None:
            raise self._failure

    def discard_pending(self) -> None:
        """Drop the events not written yet (the stream failed or was aborted: they would be tombstoned)."""
        self._pending = []

    async def close(self) -> None:
        """Stop writing (an abort): what is being written finishes, nothing queued is written."""
        self.discard_pending()
        if self._writer is not None and not self._writer.done():
            with contextlib.suppress(Exception, asyncio.CancelledError):
                await self._writer

    # -- whole entries -----------------------------------------------------------------------------

    async def publish(self, entries: list[tuple[str, IngressPayload]]) -> None:
        """Write ``entries`` (idempotency key, payload) after every queued event, in one script, with the
        in-flight record if one was set (:meth:`record`)."""
        await self.drain()
        calls = KeyCalls()
        for key, payload in entries:
            calls.add_xadd(self.ingress, self._fields(key, payload))
        if self._record is not None:
            calls.add("SET", self.inflight_key, self._record)
            self._record = None
        if len(calls):
            try:
                await self._write(calls)
            except BaseException as error:
                self._failure = error
                raise
        self.published += len(entries)

    async def _write(self, calls: KeyCalls) -> None:
        """Write ``calls`` once, again after a transient failure, until they land or ``retry_s`` has passed."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.retry_s
        delay = PUBLISH_BACKOFF_INITIAL_S
        while True:
            try:
                await self._write_once(calls)
                return
            except TRANSIENT_WRITE_ERRORS as error:
                if loop.time() + delay > deadline:
                    log.error("model_publish_failed", session_id=self.session_id, error=repr(error))
                    raise PublishFailed(self.session_id, error) from error
                self.write_retries += 1
                log.warning("model_publish_retry", session_id=self.session_id, error=repr(error), delay_s=delay)
            await self.sleep(delay)
            delay = min(delay * 2, PUBLISH_BACKOFF_MAX_S)

    async def _write_once(self, calls: KeyCalls) -> None:
        if self.fence is None:
            await calls.write(self.redis)
            return
        key, token = self.fence
        try:
            await calls.write_fenced(self.redis, key=key, token=token)
        except Fenced as fenced:
            raise SessionLeaseLost(key, token) from fenced

    def _fields(self, key: str, payload: IngressPayload) -> Fields:
        envelope = IngressEnvelope(
            session_id=self.session_id, idempotency_key=key, payload=payload, traceparent=self.traceparent
        )
        return signed_entry_fields(envelope, self.internal_key)
