"""Publishing one model call's output into its session's ingress shard, in order.

Raw stream events go out as they arrive: the first event of a burst is written at once (time to first
token matters), and the events that arrive while that write is in flight go together in the next one. A
write is one atomic script (``key_calls.py``): a batch of ``XADD``s, plus, for the reply's last batch, the
in-flight record that says the request was answered (so a worker that takes the request over after a crash
knows not to call again). Every entry is signed with the worker secret (``shared/internal_events.py``) and
has a deterministic idempotency key, so a republished entry is applied once. With a fence (the session's
call lease and its token) every write runs only while the lease holds the token; a refused write raises
:class:`~services.model.session_lease.SessionLeaseLost` (nothing of it was written).
"""

from __future__ import annotations

import asyncio
import contextlib

import orjson
import redis.asyncio as aioredis

from services.model.session_lease import SessionLeaseLost
from services.runtime.codec import DATA_FIELD, signed_entry_fields
from services.runtime.key_calls import Fenced, KeyCalls
from services.runtime.topology import Topology
from shared.events import SCHEMA_VERSION, IngressEnvelope, IngressPayload
from shared.internal_events import AUTH_FIELD, internal_event_proof
from shared.json_types import JsonObject

Fields = dict[str, bytes]


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
        self._pending: list[Fields] = []
        self._writer: asyncio.Task[None] | None = None
        self._failure: BaseException | None = None
        self._record: bytes | None = None
        self.published = 0

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

    def _queue(self, fields: Fields) -> None:
        if isinstance(self._failure, SessionLeaseLost):
            raise self._failure  # stop reading a stream whose events can no longer be written
        self._pending.append(fields)
        if self._writer is None or self._writer.done():
            self._writer = asyncio.create_task(self._write_pending())

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
            await self._write(calls)
        self.published += len(entries)

    async def _write(self, calls: KeyCalls) -> None:
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
