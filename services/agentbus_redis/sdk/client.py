"""Python client SDK: publish to a session, await its next API request, follow its events.

    async with AgentbusClient.connect("redis://localhost:6379/0") as bus:
        request = await bus.send_prompt_and_wait("s1", "list the files", timeout_s=30)

Every publish carries an idempotency key (a fresh one unless given), so a producer may retry safely.
Riding out a Redis restart or a cluster failover: a publish is retried with its idempotency key, and
every read (``follow``, ``converse``, ``next_request``, ``approvals``) is retried from the stream position
it had, while Redis stays unavailable for up to ``ride_out_s`` seconds (``AGENTBUS_REDIS_RIDE_OUT_S``,
default 60); after that one :class:`~agentbus_redis.runtime.ride_out.RedisUnavailable` is raised.
Nothing is sent for an invalid session id (:class:`InvalidSessionId`) or an entry over the ingress size
limit (:class:`IngressEntryTooLarge`); ingestion would dead-letter either.
"""

from __future__ import annotations

import asyncio
import time
import uuid
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass
from functools import partial
from types import TracebackType
from typing import TYPE_CHECKING, Any, Literal, TypeVar

import orjson
import redis.asyncio as aioredis

from agentbus_redis.bus.ingress_limits import DEFAULT_MAX_INGRESS_ENTRY_BYTES, IngressEntryTooLarge, entry_size_problem
from agentbus_redis.config.settings import Settings
from agentbus_redis.runtime import redis_client
from agentbus_redis.runtime.ride_out import DEFAULT_RIDE_OUT_S, RIDE_OUT_ERRORS, RedisUnavailable, ride_out
from agentbus_redis.session_ids import check_session_id, claude_session_id
from agentbus_redis.streams.entries import id_text
from agentbus_redis.streams.names import StreamNames
from agentbus_redis.streams.topology import Topology

# The event models, the codec, the usage and sub-agent records and the Conversation are imported by the
# methods that use them: a CLI command that lists tools or reads usage should not build every pydantic model
# of the bus (issue 27, "Fast commands"; tests/cli/test_cli_conventions.py keeps it so).
if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable

    from agentbus_redis.agents.record import ChildSummary
    from agentbus_redis.bus.events import IngressPayload, LogEntry
    from agentbus_redis.json_types import JsonObject
    from agentbus_redis.messages.content import ContentBlock
    from agentbus_redis.messages.kinds import AssistantMessage, AttachmentMessage, Message, UserMessage
    from agentbus_redis.model.usage_totals import SessionUsage
    from agentbus_redis.pi.messages import PiMessage
    from agentbus_redis.sdk.approvals import PendingApproval
    from agentbus_redis.sdk.conversation import Conversation

T = TypeVar("T")

__all__ = ["AgentbusClient", "NotReplicated", "PublishedRequest", "RedisUnavailable"]


@dataclass(frozen=True, slots=True)
class PublishedRequest:
    """An API request the normalizer published for a session."""

    session_id: str
    seq: int
    request: dict[str, Any]
    repairs: dict[str, int]


class NotReplicated(Exception):
    """A publish reached the master but not ``AGENTBUS_REDIS_WAIT_REPLICAS`` replicas in time: a failover now
    could lose it. Publish again (the same idempotency key keeps it applied once)."""

    def __init__(self, stream: str, replicas: int, wanted: int) -> None:
        super().__init__(f"{stream}: entries on {replicas} replicas, {wanted} wanted")
        self.stream = stream


class AgentbusClient:
    """A producer/observer of one agentbus deployment."""

    def __init__(
        self,
        redis: aioredis.Redis,
        topology: Topology,
        *,
        max_entry_bytes: int = DEFAULT_MAX_INGRESS_ENTRY_BYTES,
        wait_replicas: int = 0,
        wait_timeout_ms: int = 1000,
        ride_out_s: float = DEFAULT_RIDE_OUT_S,
    ) -> None:
        self.redis = redis
        self.topology = topology
        self.max_entry_bytes = max_entry_bytes
        self.wait_replicas = wait_replicas
        """Publishes return once this many replicas hold the entries (``WAIT``), else raise :class:`NotReplicated`."""
        self.wait_timeout_ms = wait_timeout_ms
        self.ride_out_s = ride_out_s
        """How long a publish or a read is retried while Redis is unavailable (module docstring)."""
        self._ingress_clients: dict[str, aioredis.Redis] = {}

    @classmethod
    def connect(cls, redis_url: str | None = None, *, names: StreamNames | None = None) -> AgentbusClient:
        settings = Settings()
        url = redis_url if redis_url is not None else settings.redis_url
        topology = Topology(names if names is not None else settings.names)
        return cls(
            redis_client.connect(url),
            topology,
            max_entry_bytes=settings.max_ingress_entry_bytes,
            wait_replicas=settings.redis_wait_replicas,
            wait_timeout_ms=settings.redis_wait_timeout_ms,
            ride_out_s=settings.redis_ride_out_s,
        )

    async def __aenter__(self) -> AgentbusClient:
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.close()

    async def close(self) -> None:
        for client in self._ingress_clients.values():
            if client is not self.redis:
                await client.aclose()
        await self.redis.aclose()

    async def ride(self, call: Callable[[], Awaitable[T]], what: str) -> T:
        """``await call()`` (idempotent: a read from a kept position, a keyed publish), riding out a Redis that
        is unavailable for up to :attr:`ride_out_s` seconds; then :class:`RedisUnavailable`."""
        return await ride_out(call, bound_s=self.ride_out_s, what=what)

    # -- publishing --------------------------------------------------------------------------

    async def publish(
        self,
        session_id: str,
        payload: IngressPayload,
        *,
        idempotency_key: str | None = None,
        traceparent: str | None = None,
    ) -> str:
        """XADD one ingress entry; returns its entry id. While Redis is unavailable the XADD is retried with
        the same idempotency key (a copy that did land first is dropped by ingestion as a duplicate), so the
        entry is applied once; after :attr:`ride_out_s` seconds, :class:`RedisUnavailable`."""
        key = idempotency_key or f"{payload.type}:{uuid.uuid4()}"
        fields = self._ingress_fields(session_id, key, payload, traceparent=traceparent)
        stream = self.topology.ingress_for(session_id)
        (entry_id,) = await self._append_landed(stream, [fields], f"publish {payload.type} (key {key}) to {session_id}")
        return entry_id

    async def publish_many(self, session_id: str, payloads: Sequence[tuple[str, IngressPayload]]) -> list[str]:
        """XADD many ingress entries in one pipeline, in order: ``(idempotency_key, payload)`` pairs; returns
        their entry ids."""
        stream = self.topology.ingress_for(check_session_id(session_id))
        entries = [self._ingress_fields(session_id, key, payload) for key, payload in payloads]
        return await self._append_landed(stream, entries, f"publish {len(entries)} entries to {session_id}")

    async def _append_landed(self, stream: str, entries: list[dict[str, bytes]], what: str) -> list[str]:
        """:meth:`_append`, retried until it lands (their idempotency keys keep a repeat applied once)."""
        errors = (*RIDE_OUT_ERRORS, NotReplicated)
        return await ride_out(lambda: self._append(stream, entries), bound_s=self.ride_out_s, what=what, errors=errors)

    async def _append(self, stream: str, entries: list[dict[str, bytes]]) -> list[str]:
        """XADD ``entries`` to ``stream`` in one pipeline; with ``wait_replicas``, then ``WAIT`` on the same
        connection (so it covers these writes), pinned to the stream's node on a cluster."""
        if not self.wait_replicas:
            if len(entries) == 1:
                return [id_text(await self.redis.xadd(stream, entries[0]))]  # type: ignore[arg-type]
            pipe = self.redis.pipeline(transaction=False)
        else:
            if stream not in self._ingress_clients:
                self._ingress_clients[stream] = redis_client.pinned_pool_client(self.redis, stream)
            pipe = self._ingress_clients[stream].pipeline(transaction=False)
        for fields in entries:
            pipe.xadd(stream, fields)  # type: ignore[arg-type]
        if self.wait_replicas:
            pipe.execute_command("WAIT", self.wait_replicas, self.wait_timeout_ms)
        replies = await pipe.execute()
        replicas = int(replies.pop()) if self.wait_replicas else 0
        if replicas < self.wait_replicas:
            raise NotReplicated(stream, replicas, self.wait_replicas)
        return [id_text(entry_id) for entry_id in replies]

    def _ingress_fields(
        self, session_id: str, idempotency_key: str, payload: IngressPayload, *, traceparent: str | None = None
    ) -> dict[str, bytes]:
        """The stream fields of one ingress entry, refused here when ingestion would dead-letter it for
        its session id or its size."""
        from agentbus_redis.bus.events import IngressEnvelope
        from agentbus_redis.runtime.codec import DATA_FIELD, entry_fields

        envelope = IngressEnvelope(
            session_id=check_session_id(session_id),
            idempotency_key=idempotency_key,
            payload=payload,
            traceparent=traceparent,
        )
        fields = entry_fields(envelope)
        size = len(fields[DATA_FIELD])
        if entry_size_problem(size, self.max_entry_bytes) is not None:
            raise IngressEntryTooLarge(session_id, size, self.max_entry_bytes)
        return fields

    async def send_prompt(self, session_id: str, content: str | list[ContentBlock], **options: Any) -> str:
        from agentbus_redis.bus.events import UserPrompt

        return await self.publish(session_id, UserPrompt(content=content, **options))

    async def send_assistant(self, session_id: str, message: AssistantMessage, *, execute_tools: bool = True) -> str:
        from agentbus_redis.bus.events import AssistantReply

        return await self.publish(session_id, AssistantReply(message=message, execute_tools=execute_tools))

    async def send_stream_event(self, session_id: str, request_id: str, event: JsonObject) -> str:
        from agentbus_redis.bus.events import StreamEvent

        return await self.publish(session_id, StreamEvent(request_id=request_id, event=event))

    async def send_stream_fallback(self, session_id: str, request_id: str) -> str:
        from agentbus_redis.bus.events import StreamFallback

        return await self.publish(session_id, StreamFallback(request_id=request_id))

    async def send_system(self, session_id: str, message: Message) -> str:
        from agentbus_redis.bus.events import SystemNotice

        return await self.publish(session_id, SystemNotice(message=message))

    async def send_attachment(self, session_id: str, message: AttachmentMessage) -> str:
        from agentbus_redis.bus.events import AttachmentNotice

        return await self.publish(session_id, AttachmentNotice(message=message))

    async def send_tool_result(self, session_id: str, message: UserMessage) -> str:
        from agentbus_redis.bus.events import ToolResultReport

        return await self.publish(session_id, ToolResultReport(message=message))

    async def send_recorded(self, session_id: str, message: Message) -> str:
        from agentbus_redis.bus.events import RecordedMessage

        return await self.publish(session_id, RecordedMessage(message=message))

    async def send_pi_message(
        self,
        session_id: str,
        message: PiMessage | JsonObject,
        *,
        message_uuid: str | None = None,
        execute_tools: bool = True,
    ) -> str:
        """Publish a pi-shaped message (user / assistant / toolResult / bashExecution / custom, P1) — a model
        or its wire object; ingestion maps it into the Claude Code model (P10). ``message_uuid`` defaults to a new
        one; an assistant's toolCalls run unless ``execute_tools`` is false."""
        from agentbus_redis.bus.events import PiMessagePayload
        from agentbus_redis.pi.messages import PI_MESSAGE_ADAPTER

        parsed = (
            PI_MESSAGE_ADAPTER.validate_python(message, by_alias=True, by_name=False)
            if isinstance(message, dict)
            else message
        )
        payload = PiMessagePayload(message=parsed, uuid=message_uuid or str(uuid.uuid4()), execute_tools=execute_tools)
        return await self.publish(session_id, payload)

    async def interrupt(self, session_id: str, *, reason: Literal["user_cancel", "interrupt"] = "user_cancel") -> str:
        from agentbus_redis.bus.events import Interrupt

        return await self.publish(session_id, Interrupt(reason=reason))

    # -- observing ---------------------------------------------------------------------------

    @staticmethod
    def claude_session_id(session_id: str) -> str:
        """The id to pass to ``claude --resume`` for ``session_id``'s transcript (its file name, a UUID:
        :func:`agentbus_redis.session_ids.claude_session_id`)."""
        return claude_session_id(session_id)

    async def latest_request(self, session_id: str) -> PublishedRequest | None:
        key = self.topology.request(session_id)
        raw = await self.ride(lambda: self.redis.get(key), f"read the request of {session_id}")
        if raw is None:
            return None
        body = orjson.loads(raw)
        return PublishedRequest(session_id, int(body["seq"]), body["request"], dict(body.get("repairs", {})))

    async def next_request(
        self, session_id: str, *, after_seq: int | None = None, timeout_s: float = 30.0
    ) -> PublishedRequest:
        """Wait for the session's next API request and return it; never one older than the call or ``after_seq``.

        "Next" means: with ``after_seq=None`` (the default) the first request the normalizer publishes for
        ``session_id`` after this call started (a reused session's earlier requests are never returned);
        with ``after_seq=N``, the first with ``seq > N`` (``seq`` is the session's log position the
        request covers; take it from :meth:`latest_request` before publishing, or from an earlier
        request). Only the newest body of a session is kept, so if several requests were published before
        this call looked, the newest of them is returned. To send a prompt and get the request it leads
        to without racing the normalizer, use :meth:`send_prompt_and_wait`. Raises ``TimeoutError``
        after ``timeout_s``."""
        deadline = time.monotonic() + timeout_s
        requests = self.topology.requests_for(session_id)
        last: Any = await self.ride(lambda: self.redis.xrevrange(requests, count=1), f"read {requests}")
        cursor: bytes = last[0][0] if last else b"0-0"
        if after_seq is None:
            before = await self.latest_request(session_id)
            after_seq = before.seq if before is not None else 0
        while True:
            current = await self.latest_request(session_id)
            if current is not None and current.seq > after_seq:
                return current
            remaining_ms = int((deadline - time.monotonic()) * 1000)
            if remaining_ms <= 0:
                msg = f"no request for session {session_id} after seq {after_seq} within {timeout_s}s"
                raise TimeoutError(msg)
            read = partial(self.redis.xread, {requests: cursor}, block=min(remaining_ms, 1000), count=100)
            rows: Any = await self.ride(read, f"read {requests}")
            for _, entries in rows:
                if entries:
                    cursor = entries[-1][0]

    async def send_prompt_and_wait(
        self, session_id: str, content: str | list[ContentBlock], *, timeout_s: float = 30.0, **options: Any
    ) -> PublishedRequest:
        """Publish a prompt and return the first request published after it (the one it leads to, or a
        later one): the session's position is read before the prompt is sent, so a fast normalizer cannot
        be missed."""
        before = await self.latest_request(session_id)
        await self.send_prompt(session_id, content, **options)
        return await self.next_request(session_id, after_seq=before.seq if before else 0, timeout_s=timeout_s)

    def converse(self, session_id: str, content: str | list[ContentBlock], **options: Any) -> Conversation:
        """Send a prompt and yield the model's turn as it happens — text deltas, tool calls and results,
        API errors — until the turn ends (the last event is a ``TurnEnd``)::

            async for event in bus.converse("s1", "list the files"):
                if event.type == "text_delta":
                    print(event.text, end="", flush=True)

        ``timeout_s`` (default 300) bounds the wait for any progress (``ConversationTimeout``); other
        options go to :meth:`send_prompt`. ``await conversation.interrupt()`` interrupts the turn (keep
        iterating to see it close). See sdk/conversation.py."""
        from agentbus_redis.sdk.conversation import Conversation

        return Conversation(self, session_id, content, **options)

    async def history(self, session_id: str) -> list[LogEntry]:
        """Every log entry of the session so far."""
        from agentbus_redis.bus.events import parse_log_entry
        from agentbus_redis.runtime.codec import DATA_FIELD

        stream = self.topology.session_events(session_id)
        rows: Any = await self.ride(lambda: self.redis.xrange(stream), f"read {stream}")
        return [parse_log_entry(fields[DATA_FIELD.encode()]) for _, fields in rows]

    async def usage(self, session_id: str) -> SessionUsage:
        """The session's model usage and cost so far, per model and in total (M10.5; ``.empty`` when no call
        was recorded). Costs were computed when each call was recorded, with the price table then in force.
        A call is recorded by the model worker just after its reply's last event is written, not with it: read
        right after a turn ended, its last call may show a moment later."""
        from agentbus_redis.stores.usage import read_usage

        return await read_usage(self.redis, self.topology, session_id)

    async def session_tree(self, session_id: str) -> ChildSummary:
        """``session_id`` and the sub-agent sessions its Agent calls started, recursively (A4): each node
        with its agentId, agent type, description, status and children."""
        from agentbus_redis.subagents.tree import session_tree

        return await session_tree(self.redis, self.topology, session_id)

    async def stop_agent(self, agent: str) -> ChildSummary:
        """A8.3: stop a running sub-agent — a background one is the way it ends early — named by its child
        session id or its agentId. Its parent is told as for any end: a background child's with a
        ``<task-notification>`` of ``status: killed`` and its partial result (A5.4). Raises
        :class:`agentbus_redis.subagents.stop.AgentNotStoppable` for an unknown or ended agent."""
        from agentbus_redis.agents.record import ChildSummary
        from agentbus_redis.subagents.stop import resolve_running_child

        record = await resolve_running_child(self.redis, self.topology, agent)
        await self.interrupt(record.session_id)
        return ChildSummary(
            session_id=record.session_id,
            agent_id=record.agent_id,
            agent_type=record.agent_type,
            description=record.description,
            status="running",
            parent_tool_use_id=record.parent_tool_use_id,
        )

    async def tree_usage(self, session_id: str) -> SessionUsage:
        """The model usage and cost of ``session_id`` and all its sub-agents, added up (``usage --tree``)."""
        from agentbus_redis.model.usage_totals import combine_usage
        from agentbus_redis.subagents.tree import walk

        tree = await self.session_tree(session_id)
        parts = [await self.usage(node.session_id) for _, node in walk(tree)]
        return combine_usage(session_id, parts)

    async def follow(
        self, session_id: str, *, from_start: bool = True, block_ms: int = 1000
    ) -> AsyncIterator[LogEntry]:
        """Yield the session's log entries as they are written. It never ends by itself, even when the
        session is idle: ``break`` out of the loop, or bound it with ``asyncio.timeout(...)``
        (``TimeoutError``) or by cancelling the task that iterates. A Redis restart or failover is ridden out:
        the read resumes from the last entry yielded, so none is repeated or skipped (up to :attr:`ride_out_s`
        seconds, then :class:`RedisUnavailable`)."""
        from agentbus_redis.bus.events import parse_log_entry
        from agentbus_redis.runtime.codec import DATA_FIELD

        cursor: bytes | str = "0-0" if from_start else "$"
        stream = self.topology.session_events(session_id)
        while True:
            read = partial(self.redis.xread, {stream: cursor}, block=block_ms, count=500)
            rows: Any = await self.ride(read, f"follow {stream}")
            for _, entries in rows:
                for entry_id, fields in entries:
                    cursor = entry_id
                    yield parse_log_entry(fields[DATA_FIELD.encode()])
            await asyncio.sleep(0)

    # -- approvals (agent-loop.md §H) --------------------------------------------------------

    def approvals(self, session_id: str | None = None, *, block_ms: int = 1000) -> AsyncIterator[PendingApproval]:
        """Tool calls waiting for a person (``AGENTBUS_TOOLS__ASK_POLICY=approve``): every pending one, then
        each new one; answer with ``await req.allow(updated_input=…)``, ``req.always_allow()`` or
        ``req.deny(message=…, interrupt=…)`` (sdk/approvals.py)."""
        from agentbus_redis.sdk.approvals import follow_approvals

        return follow_approvals(self, session_id, block_ms=block_ms)

    async def pending_approvals(self, session_id: str | None = None) -> list[PendingApproval]:
        """The approvals pending now (of one session, or all), oldest first."""
        from agentbus_redis.sdk.approvals import PendingApproval
        from agentbus_redis.stores.approvals import ApprovalStore

        return [PendingApproval(r, self) for r in await ApprovalStore(self.redis, self.topology).pending(session_id)]

    async def approval(self, approval_id: str) -> PendingApproval | None:
        """One approval by id, pending or not (``None`` when unknown)."""
        from agentbus_redis.sdk.approvals import PendingApproval, find_approval

        stored = await find_approval(self, approval_id)
        return None if stored is None else PendingApproval(stored.request, self)
