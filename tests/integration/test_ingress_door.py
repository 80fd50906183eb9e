"""Issue 15, the door: what a producer may put on ingress, against real worker processes that each
connect as their own Redis ACL user (deploy/redis/users.acl) and a producer that holds only the
``producer`` credential.

- Internal events cannot be forged: a deadline sweep, a job abandon, a tool result or progress in a
  tool worker's name are dead-lettered ``forged_internal_event`` (never applied); the workers' own
  (authenticated) sweeps, results and abandons still work end to end.
- Session ids are checked: ``..``, ``/``, control characters, overlong ids → ``invalid_session_id``.
- Size limits: an entry over ``AGENTBUS_MAX_INGRESS_ENTRY_BYTES`` → ``too_large`` with its size.

:func:`door_cases` is the table of (kind, raw entry, expected reason): the door's refusals above plus every
malformed kind of entry (:func:`malformed_cases`: not JSON, not an object, undecodable bytes, an unknown
payload, missing or mistyped fields, a future schema version, a session on another shard's stream,
malformed blocks and stream events). The main test sends all of them, shuffled and twice over, between
good sessions' traffic (the issue's fuzz test): each is dead-lettered at ingress with its own reason, no
worker exits, nothing is dead-lettered further down, and every good session's transcript is complete.
"""

from __future__ import annotations

import json
import random
import uuid
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import orjson
import pytest
import redis
import redis.asyncio as aioredis

from agentbus_redis.bus.events import SCHEMA_VERSION, parse_tool_job
from agentbus_redis.config.settings import Settings
from agentbus_redis.messages.constants import SYNTHETIC_TOOL_RESULT_PLACEHOLDER
from agentbus_redis.messages.content import TextBlock, ToolResultBlock, ToolUseBlock
from agentbus_redis.messages.factories import create_assistant_message, create_progress_message, create_user_message
from agentbus_redis.messages.kinds import UserMessage
from agentbus_redis.sdk.client import AgentbusClient, PublishedRequest
from agentbus_redis.sdk.replay import wait_until_persisted
from agentbus_redis.streams.deadletter import DeadLetter, dead_letter_streams, list_dead_letters
from agentbus_redis.streams.names import dead_letter_stream
from agentbus_redis.streams.topology import TOOLS_GROUP, Topology
from tests.integration.cluster import Worker, WorkerCluster, eventually
from tests.services.acl_redis import AclRedis, start_acl_redis

pytestmark = [pytest.mark.integration, pytest.mark.slow]

MAX_ENTRY_BYTES = 64 * 1024
FORGED_TEXT = "FORGED RESULT"
UNICODE_SESSION = "door-unicode"


def elsewhere(bus: AgentbusClient, session: str) -> str:
    """A session id whose shard is not ``session``'s."""
    shard_of = bus.topology.names.shard_of
    return next(other for other in (f"elsewhere-{n}" for n in range(1000)) if shard_of(other) != shard_of(session))


class AclCluster(WorkerCluster):
    """Workers that each connect as their own ACL user (as compose and k8s run them)."""

    acl: AclRedis

    def start(
        self, name: str, count: int = 1, *, args: Sequence[str] = (), env: Mapping[str, str] | None = None
    ) -> list[Worker]:
        return super().start(name, count, args=args, env={"REDIS_URL": self.acl.url(name), **(env or {})})

    def producer(self) -> AgentbusClient:
        """A producer (SDK) with the producer credential: no worker secret, no worker ACL."""
        return AgentbusClient(
            aioredis.Redis.from_url(self.acl.url("producer")), Topology(self.names), max_entry_bytes=MAX_ENTRY_BYTES
        )

    def operator(self) -> aioredis.Redis:
        return aioredis.Redis.from_url(self.acl.url("operator"))

    def start_lanes(self) -> None:
        """The ordered workers only: calls dispatched now wait for a tool worker."""
        for name in ("ingestion", "normalization", "transcripts"):
            self.start(name)
        self.wait_ready()

    def alive(self) -> bool:
        return all(worker.process.poll() is None for worker in self.workers)


@pytest.fixture
def acl_cluster(tmp_path: Any) -> Iterator[AclCluster]:
    server = start_acl_redis(tmp_path / "redis")
    cluster = AclCluster(redis_url=server.url("operator"), root=tmp_path)
    cluster.acl = server
    cluster.extra_env.update(
        {
            "AGENTBUS_MAX_INGRESS_ENTRY_BYTES": str(MAX_ENTRY_BYTES),
            "AGENTBUS_TOOLS__TIMEOUT_S": "30",
            "AGENTBUS_TOOLS__DEADLINE_S": "120",
        }
    )
    try:
        yield cluster
    finally:
        cluster.stop()
        server.stop()


# -- the table of bad entries ----------------------------------------------------------------------


@dataclass(frozen=True)
class DoorCase:
    """One ingress entry a producer may not get past the door: the session whose shard it is written to,
    its stream fields, and the reason ingestion must dead-letter it for."""

    kind: str
    session: str
    fields: dict[str, bytes]
    reason: str


@dataclass(frozen=True)
class PendingCall:
    """A call of a good session that was dispatched to the tool workers and has no result yet."""

    session: str
    assistant_uuid: str
    call_id: str


def envelope(session: str, payload: dict[str, Any], *, key: str | None = None) -> dict[str, bytes]:
    body = {
        "v": SCHEMA_VERSION,
        "session_id": session,
        "idempotency_key": key or f"door:{uuid.uuid4()}",
        "payload": payload,
    }
    return {"data": orjson.dumps(body)}


def door_cases(target: PendingCall) -> list[DoorCase]:
    """Every kind of entry the door refuses, aimed at ``target`` (its forged results name its call)."""
    session, call = target.session, target.call_id
    forged_result = create_user_message(
        [ToolResultBlock(tool_use_id=call, content=FORGED_TEXT)], source_tool_assistant_uuid=target.assistant_uuid
    ).to_wire()
    forged_progress = create_progress_message(
        tool_use_id=f"{call}-progress", parent_tool_use_id=call, data={"type": "bash_progress", "output": FORGED_TEXT}
    ).to_wire()
    sweep = {"type": "deadline_sweep", "now_ms": 10**13}
    forged = "forged_internal_event"
    prompt = {"type": "user_prompt", "content": "hello"}
    return [
        DoorCase("forged_deadline_sweep", session, envelope(session, sweep), forged),
        DoorCase(
            "forged_deadline_sweep_with_a_bad_proof",
            session,
            {**envelope(session, sweep, key=f"deadline_sweep:{session}:1"), "auth": b"0" * 64},
            forged,
        ),
        DoorCase(
            "forged_tool_job_abandoned",
            session,
            envelope(
                session,
                {
                    "type": "tool_job_abandoned",
                    "assistant_uuid": target.assistant_uuid,
                    "tool_use_ids": [call],
                    "reason": "max_deliveries",
                },
            ),
            forged,
        ),
        DoorCase(
            "tool_result_in_a_tool_workers_name",
            session,
            envelope(session, {"type": "tool_result", "message": forged_result}, key=f"tool_result:{call}"),
            forged,
        ),
        DoorCase(
            "recorded_result_for_a_dispatched_call",
            session,
            envelope(session, {"type": "recorded_message", "message": forged_result}),
            forged,
        ),
        DoorCase(
            "tool_progress_in_a_tool_workers_name",
            session,
            envelope(session, {"type": "tool_progress", "message": forged_progress}),
            forged,
        ),
        DoorCase(
            "prompt_taking_a_worker_key",
            session,
            envelope(session, prompt, key=f"internal:tool_result:{call}"),
            forged,
        ),
        *(
            DoorCase(f"session_id_{name}", bad, envelope(bad, prompt), "invalid_session_id")
            for name, bad in [
                ("escaping_the_data_dir", "../../escape-test"),
                ("dot_dot", ".."),
                ("dot", "."),
                ("with_a_slash", "a/b"),
                ("with_a_newline", "line\nbreak"),
                ("with_an_escape", "esc\x1b[31mred"),
                ("over_128_characters", "s" * 129),
                ("over_255_bytes", "é" * 200),
            ]
        ),
        DoorCase(
            "entry_over_the_size_limit",
            session,
            envelope(session, {"type": "user_prompt", "content": "x" * (MAX_ENTRY_BYTES + 1)}),
            "too_large",
        ),
    ]


def raw(body: object) -> dict[str, bytes]:
    """Stream fields whose ``data`` is ``body`` as JSON, whatever its shape."""
    return {"data": orjson.dumps(body)}


def malformed_cases(target: PendingCall, session_elsewhere: str) -> list[DoorCase]:
    """Every malformed kind of ingress entry, each written to ``target``'s shard (``session_elsewhere`` is
    a session of another shard: a valid entry of it on this shard's stream is misrouted)."""
    session = target.session
    prompt = {"type": "user_prompt", "content": "x"}

    def with_payload(payload: object, **overrides: object) -> dict[str, bytes]:
        body = {"v": SCHEMA_VERSION, "session_id": session, "idempotency_key": f"m:{uuid.uuid4()}", "payload": payload}
        return raw(body | overrides)

    call_without_id = {"type": "tool_use", "name": "Bash", "input": {}}
    reply: dict[str, Any] = json.loads(create_assistant_message([TextBlock(text="t")]).to_wire_json())
    reply["message"]["content"] = [call_without_id]
    delta_first = {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "x"}}
    system_user = {"type": "system_message", "message": create_user_message("x").to_wire()}
    prompt_call = {"type": "user_prompt", "content": [call_without_id]}
    early_delta = {"type": "stream_event", "request_id": "r", "event": delta_first}
    invalid, bad_input = "invalid_entry", "invalid_input"
    cases: list[tuple[str, dict[str, bytes], str]] = [
        ("no_data_field", {"other": b"1"}, "decode_error"),
        ("not_json", {"data": b"{not json"}, invalid),
        ("json_array", {"data": b"[1,2]"}, invalid),
        ("json_string", {"data": b'"hello"'}, invalid),
        ("undecodable_bytes", {"data": b'{"v":1,"session_id":"\xff\xfe"}'}, invalid),
        ("unknown_payload_type", with_payload({"type": "launch_missiles"}), invalid),
        ("payload_not_an_object", with_payload("hello"), invalid),
        ("missing_session_id", raw({"v": SCHEMA_VERSION, "idempotency_key": "k", "payload": prompt}), invalid),
        ("session_id_not_a_string", with_payload(prompt, session_id=7), invalid),
        ("empty_idempotency_key", with_payload(prompt, idempotency_key=""), invalid),
        ("future_schema_version", with_payload(prompt, v=99), "unsupported_schema_version"),
        ("prompt_content_a_number", with_payload({"type": "user_prompt", "content": 42}), invalid),
        ("system_notice_carrying_a_user_message", with_payload(system_user), invalid),
        ("interrupt_with_an_unknown_reason", with_payload({"type": "interrupt", "reason": "because"}), invalid),
        ("stream_event_without_request_id", with_payload({"type": "stream_event", "event": {}}), invalid),
        ("prompt_with_a_call_without_id", with_payload(prompt_call), bad_input),
        ("reply_with_a_call_without_id", with_payload({"type": "assistant_message", "message": reply}), bad_input),
        ("stream_event_out_of_order", with_payload(early_delta), bad_input),
    ]  # fmt: skip
    misrouted = envelope(session_elsewhere, prompt)
    return [
        *(DoorCase(kind, session, fields, reason) for kind, fields, reason in cases),
        DoorCase("session_on_another_shards_stream", session, misrouted, "wrong_shard"),
    ]


async def ingress_letters(operator: aioredis.Redis, topology: Topology) -> list[DeadLetter]:
    letters: list[DeadLetter] = []
    for shard in range(topology.shards):
        letters += await list_dead_letters(operator, dead_letter_stream(topology.ingress(shard)), count=10_000)
    return letters


# -- good traffic ----------------------------------------------------------------------------------


async def start_turn(bus: AgentbusClient, session: str) -> tuple[PendingCall, PublishedRequest]:
    """A prompt, then a reply with one call dispatched to the tool workers (none run yet)."""
    # send_prompt_and_wait reads the session's position before sending: a plain next_request after the
    # send races a fast normalizer (seq 1 already published → it would wait for seq 2 forever).
    first = await bus.send_prompt_and_wait(session, f"say {session}", timeout_s=60)
    call = ToolUseBlock(id=f"toolu_{uuid.uuid4().hex[:20]}", name="Bash", input={"command": f"echo real-{session}"})
    reply = create_assistant_message([TextBlock(text="Running it."), call])
    await bus.send_assistant(session, reply)

    async def logged() -> bool:
        return any(entry.message.type == "assistant" for entry in await bus.history(session))

    await eventually(logged, timeout_s=30)
    return PendingCall(session, reply.uuid, call.id), first


def results_of(request: PublishedRequest) -> list[dict[str, Any]]:
    return [
        b
        for m in request.request["messages"]
        for b in m["content"]
        if isinstance(m["content"], list) and b.get("type") == "tool_result"
    ]


def assert_answered_by_the_placeholder(request: PublishedRequest, call: PendingCall) -> None:
    assert [(r["tool_use_id"], r["content"]) for r in results_of(request)] == [
        (call.call_id, SYNTHETIC_TOOL_RESULT_PLACEHOLDER)
    ]


# -- the tests -------------------------------------------------------------------------------------


@pytest.mark.timeout(300)
async def test_forged_events_bad_ids_and_oversized_entries_stop_at_the_door(acl_cluster: AclCluster) -> None:
    cluster = acl_cluster
    cluster.start_lanes()
    good = [f"door-good-{index}" for index in range(3)]
    operator = cluster.operator()
    bus = cluster.producer()
    try:
        started = [await start_turn(bus, session) for session in good]
        pending = [call for call, _ in started]

        # The producer credential cannot reach the workers' streams at all.
        with pytest.raises(redis.exceptions.NoPermissionError):
            await bus.redis.xadd(bus.topology.tool_jobs_for(good[0]), {"data": b"{}"})
        with pytest.raises(redis.exceptions.NoPermissionError):
            await bus.redis.xadd(bus.topology.log_for(good[0]), {"data": b"{}"})
        with pytest.raises(redis.exceptions.NoPermissionError):
            await bus.redis.xrange(bus.topology.tool_jobs_for(good[0]))

        # Every bad entry, written with the producer credential, each tagged with a probe.
        # The forgeries aim at every good session's pending call; the other kinds once.
        cases = door_cases(pending[0]) + [
            case for target in pending[1:] for case in door_cases(target) if case.reason == "forged_internal_event"
        ]
        cases += [case for target in pending for case in malformed_cases(target, elsewhere(bus, target.session))]
        cases = cases * 2
        random.Random(15).shuffle(cases)
        probes: dict[str, DoorCase] = {}
        for index, case in enumerate(cases):
            probe = f"{index}:{case.kind}"
            probes[probe] = case
            stream = bus.topology.ingress_for(case.session)
            await bus.redis.xadd(stream, {**case.fields, "probe": probe.encode()})  # type: ignore[dict-item]
            if index % 10 == 0:  # good traffic between the bad: NUL, emoji, bidi override
                await bus.send_prompt(UNICODE_SESSION, f"mixed {index} \x00 \U0001f600 \u202e")

        async def all_dead_lettered() -> bool:
            return len(await ingress_letters(operator, bus.topology)) >= len(cases)

        try:
            await eventually(all_dead_lettered, timeout_s=30)
        finally:  # on a timeout, name the kinds that got past the door
            letters = await ingress_letters(operator, bus.topology)
            missing = set(probes) - {letter.fields.get("probe", b"").decode() for letter in letters}
            assert not missing, sorted({probe.split(":", 1)[1] for probe in missing})
        got = sorted((letter.fields["probe"].decode(), letter.reason) for letter in letters)
        assert got == sorted((probe, case.reason) for probe, case in probes.items())
        for letter in letters:
            assert letter.group == "ingestion"
            case = probes[letter.fields["probe"].decode()]
            assert {k: v for k, v in letter.fields.items() if k != "probe"} == case.fields
            if case.reason == "too_large":
                assert f"{len(case.fields['data'])} bytes" in letter.detail
            assert case.kind != "session_on_another_shards_stream" or "does not belong" in letter.detail
        # No file was created from a bad id, inside the data dir or outside it.
        assert not (cluster.root / "escape-test.lock").exists()
        assert not list(cluster.root.rglob("*escape-test*"))

        # Now the tool workers run: every call is answered by its real result, never by a forgery.
        cluster.start("tools")
        cluster.wait_ready()
        for (call, first), session in zip(started, good, strict=True):
            request = await bus.next_request(session, after_seq=first.seq, timeout_s=120)
            results = results_of(request)
            assert [r["tool_use_id"] for r in results] == [call.call_id]
            text = json.dumps(results)
            assert f"real-{session}" in text
            assert FORGED_TEXT not in text
            assert SYNTHETIC_TOOL_RESULT_PLACEHOLDER not in text
            history = [entry.message for entry in await bus.history(session)]
            assert FORGED_TEXT not in json.dumps([m.to_wire() for m in history])

            # The transcript is complete: every persisted message of the log, in order.
            settings = Settings(
                redis_url=cluster.redis_url, data_dir=cluster.data_dir, shards=cluster.names.shards, cwd=cluster.cwd
            )
            path = await wait_until_persisted(bus, session, settings=settings, timeout_s=30)
            lines = [json.loads(line) for line in path.read_text().splitlines()]
            persisted = [m.uuid for m in history if m.type in {"user", "assistant", "system"}]
            assert [line["uuid"] for line in lines] == persisted
            assert len(persisted) == 3  # prompt, reply, real result

        # The prompts sent between the bad entries are all persisted.
        unicode_history = await bus.history(UNICODE_SESSION)
        assert len(unicode_history) == len(range(0, len(cases), 10))
        settings = Settings(
            redis_url=cluster.redis_url, data_dir=cluster.data_dir, shards=cluster.names.shards, cwd=cluster.cwd
        )
        path = await wait_until_persisted(bus, UNICODE_SESSION, settings=settings, timeout_s=30)
        assert len(path.read_text().splitlines()) == len(unicode_history)

        # Nothing but the door's refusals was dead-lettered, and no worker exited.
        others = [s for s in await dead_letter_streams(operator, bus.topology.names) if ":ingress:" not in s]
        assert [(s, n) for s in others if (n := await operator.xlen(s))] == []
        assert cluster.alive(), cluster.logs()
    finally:
        await bus.close()
        await operator.aclose()


@pytest.mark.timeout(120)
async def test_the_sweepers_own_deadline_sweep_still_answers_under_acl(acl_cluster: AclCluster) -> None:
    """The authenticated sweep works end to end: a call past its deadline gets the placeholder."""
    cluster = acl_cluster
    cluster.extra_env["AGENTBUS_TOOLS__DEADLINE_S"] = "1"
    cluster.start_lanes()
    bus = cluster.producer()
    try:
        # No tool worker runs, so the call's deadline passes and the sweeper answers it.
        swept, first = await start_turn(bus, "door-swept")
        request = await bus.next_request("door-swept", after_seq=first.seq, timeout_s=60)
        assert_answered_by_the_placeholder(request, swept)
        assert cluster.alive(), cluster.logs()
    finally:
        await bus.close()


@pytest.mark.timeout(120)
async def test_a_tool_workers_abandon_answers_a_dead_lettered_job_under_acl(acl_cluster: AclCluster) -> None:
    """The authenticated abandon works end to end: the tool worker answers a dead-lettered job's calls."""
    cluster = acl_cluster
    cluster.start_lanes()
    operator = cluster.operator()
    bus = cluster.producer()
    tools_user = aioredis.Redis.from_url(cluster.acl.url("tools"))
    try:
        abandoned, first = await start_turn(bus, "door-abandoned")
        # The job is dead-lettered as the tool consumer does after max deliveries (and leaves the stream).
        jobs = bus.topology.tool_jobs_for("door-abandoned")
        rows: Any = await operator.xrange(jobs)
        (job_id, job_fields), *_ = [
            (entry_id, fields)
            for entry_id, fields in rows
            if parse_tool_job(fields[b"data"]).session_id == "door-abandoned"
        ]
        letter = DeadLetter(
            stream=jobs,
            group=TOOLS_GROUP,
            entry_id=job_id.decode(),
            consumer="tools-gone",
            delivery_count=5,
            reason="max_deliveries",
            at_ms=0,
            fields={key.decode(): value for key, value in job_fields.items()},
        )
        await operator.xdel(jobs, job_id)
        await tools_user.xadd(dead_letter_stream(jobs), letter.to_stream_fields())  # type: ignore[arg-type]
        cluster.start("tools")
        cluster.wait_ready()
        request = await bus.next_request("door-abandoned", after_seq=first.seq, timeout_s=60)
        assert_answered_by_the_placeholder(request, abandoned)
        assert cluster.alive(), cluster.logs()
    finally:
        await bus.close()
        await operator.aclose()
        await tools_user.aclose()


@pytest.mark.timeout(120)
async def test_a_refused_entry_does_not_use_up_its_idempotency_key(cluster: WorkerCluster) -> None:
    """A producer's corrected retry under the key of an entry refused as bad input is applied, not dropped
    as a duplicate (nothing of the refused entry was applied)."""
    cluster.start("ingestion")
    cluster.wait_ready()
    session = "door-retry"
    async with cluster.client() as bus:
        stream = bus.topology.ingress_for(session)
        call_without_id = {"type": "tool_use", "name": "Bash", "input": {}}
        await bus.redis.xadd(stream, envelope(session, {"type": "user_prompt", "content": [call_without_id]}, key="k1"))  # type: ignore[arg-type]
        await bus.redis.xadd(stream, envelope(session, {"type": "user_prompt", "content": "corrected"}, key="k1"))  # type: ignore[arg-type]

        async def logged() -> bool:
            return len(await bus.history(session)) == 1

        await eventually(logged, timeout_s=60)
        (entry,) = await bus.history(session)
        assert isinstance(entry.message, UserMessage)
        assert entry.message.message.content == "corrected"
        letters = await list_dead_letters(bus.redis, dead_letter_stream(stream), count=10)
        assert [letter.reason for letter in letters] == ["invalid_input"]
