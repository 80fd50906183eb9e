"""Issue 4, crash safety: SIGKILL one instance of a worker type in the middle of a batch while steady
traffic flows through two instances of every worker type; the survivors take over (lease expiry for the
ordered lanes, XAUTOCLAIM for the tool pool) and nothing is lost or duplicated.

The traffic is many concurrent sessions, each a scripted "model" that waits for the session's API
request before answering, exactly as a producer would: prompts, replies with tool calls the tool workers
run (``Bash(echo:*)``, ``Bash(sleep:*)``, ``Read``), half of them streamed as raw stream events (R9).
The deployment starts with one instance of each worker and scales to two while traffic flows, so shards
are handed over once before the crash, and the crashed instance's shards go back to an instance that
owned them earlier.

What "nothing lost, nothing duplicated" means here, per session:
- the canonical log (the session's event stream and the shard log) holds seqs 1..n, each once;
- every message the producer sent (prompt, reply, streamed block) is logged exactly once, and the log
  holds exactly the expected number of messages;
- every tool call is answered exactly once, with its real output (never the placeholder);
- the transcript holds every persisted message of the log exactly once, in log order, chained as logged;
- the last published request is what the shared/ rules make of the log, and it validates;
- no entry of any stream was dead-lettered.
"""

from __future__ import annotations

import asyncio
import contextlib
import difflib
import json
import os
import signal
import uuid
from collections import Counter
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

import pytest

from agentbus_redis.api.validation import validate_api_request
from agentbus_redis.bus.events import UserPrompt, parse_log_entry
from agentbus_redis.cli.local.demo import stream_events_for
from agentbus_redis.messages.constants import SYNTHETIC_TOOL_RESULT_PLACEHOLDER
from agentbus_redis.messages.content import ContentBlock, TextBlock, ToolResultBlock, ToolUseBlock
from agentbus_redis.messages.factories import create_assistant_message
from agentbus_redis.messages.kinds import AssistantMessage, ProgressMessage, UserMessage
from agentbus_redis.normalize import to_api_request
from agentbus_redis.runtime.leases import preferred_owner
from agentbus_redis.sdk.client import AgentbusClient, PublishedRequest
from agentbus_redis.streams.deadletter import dead_letter_streams, list_dead_letters
from agentbus_redis.streams.entries import id_text
from agentbus_redis.streams.topology import INGESTION_GROUP, NORMALIZATION_GROUP, TOOLS_GROUP, TRANSCRIPTS_GROUP
from agentbus_redis.transcript_files.layout import session_file
from agentbus_redis.workers.normalization.worker import SENDER_FITS_THINKING as WORKER_OPTIONS
from tests.conftest import on_targets
from tests.integration.cluster import Worker, WorkerCluster, eventually

pytestmark = [pytest.mark.integration, pytest.mark.slow]

RELAXED_TOOL_LIMITS = {"AGENTBUS_TOOLS__TIMEOUT_S": "30", "AGENTBUS_TOOLS__DEADLINE_S": "120"}

SESSIONS = 8
MAX_TURNS = 100
REQUEST_TIMEOUT_S = 60.0
TURNS_AFTER_KILL = 2
"""Turns every session (on average) still plays after the kill, across the takeover."""

GROUP_OF_WORKER = {
    "ingestion": INGESTION_GROUP,
    "normalization": NORMALIZATION_GROUP,
    "transcripts": TRANSCRIPTS_GROUP,
    "tools": TOOLS_GROUP,
}


@dataclass
class Script:
    """What one session's producer sent, and what the log must therefore hold."""

    session: str
    prompt_uuids: list[str] = field(default_factory=list)
    reply_uuids: list[str] = field(default_factory=list)
    streamed_ids: list[str] = field(default_factory=list)
    calls: dict[str, str] = field(default_factory=dict)
    """tool_use id → text its result must contain ("" when the command prints nothing)."""
    call_order: list[str] = field(default_factory=list)
    expected_messages: int = 0
    """user/assistant messages the log must hold (progress excluded)."""
    last_request: PublishedRequest | None = None


@dataclass
class Traffic:
    """Turns completed over all sessions; producers keep going until ``stop`` is set."""

    turns: int = 0
    stop: asyncio.Event = field(default_factory=asyncio.Event)
    _waiters: list[tuple[int, asyncio.Event]] = field(default_factory=list)

    def turn_done(self) -> None:
        self.turns += 1
        for target, event in self._waiters:
            if self.turns >= target:
                event.set()

    async def wait_turns(self, target: int) -> None:
        """Until ``target`` turns are done in total."""
        event = asyncio.Event()
        self._waiters.append((target, event))
        if self.turns >= target:
            event.set()
        await event.wait()


def call(name: str, **tool_input: Any) -> ToolUseBlock:
    return ToolUseBlock(id=f"toolu_{uuid.uuid4().hex[:20]}", name=name, input=tool_input)


async def converse(bus: AgentbusClient, script: Script, traffic: Traffic) -> Script:
    """Play the model's side of one session until told to stop: per turn a prompt, a reply with tool
    calls, and (awaited) the request that carries their results."""
    session = script.session
    seq = 0

    async def next_request() -> PublishedRequest:
        nonlocal seq
        try:
            request = await bus.next_request(session, after_seq=seq, timeout_s=REQUEST_TIMEOUT_S)
        except TimeoutError:
            raise AssertionError(await stall_report(bus, session, seq)) from None
        seq = request.seq
        script.last_request = request
        return request

    for turn in range(MAX_TURNS):
        if traffic.stop.is_set():
            break
        prompt_uuid = str(uuid.uuid4())
        await bus.publish(
            session, UserPrompt(content=f"turn {turn}: echo and read", uuid=prompt_uuid), idempotency_key=prompt_uuid
        )
        script.prompt_uuids.append(prompt_uuid)
        script.expected_messages += 1
        request = await next_request()
        assert request.request["messages"][-1]["role"] == "user"

        token = f"{session}-turn-{turn}"
        calls = [call("Bash", command=f"echo {token}"), call("Read", file_path=f"{session}.txt")]
        if turn % 3 == 1:
            calls.append(call("Bash", command="sleep 0.2"))
        script.calls.update({calls[0].id: token, calls[1].id: f"read-me {session}"})
        script.calls.update({c.id: "" for c in calls[2:]})
        script.call_order += [c.id for c in calls]
        blocks: list[ContentBlock] = [TextBlock(text=f"Turn {turn}: running {len(calls)} tools."), *calls]
        script.expected_messages += len(calls)  # one result each
        if (turn + len(session)) % 2 == 0:
            message_id = f"msg_{uuid.uuid4().hex[:16]}"
            script.streamed_ids.append(message_id)
            script.expected_messages += len(blocks)  # R9.4: one message per content block
            for event in stream_events_for(blocks, message_id=message_id, model="claude-test"):
                await bus.send_stream_event(session, f"req_{message_id}", event)
        else:
            reply = create_assistant_message(blocks)
            script.reply_uuids.append(reply.uuid)
            script.expected_messages += 1
            await bus.send_assistant(session, reply)
        request = await next_request()
        answered = [b["tool_use_id"] for b in request.request["messages"][-1]["content"] if b["type"] == "tool_result"]
        # R8.5: every result of the turn, in completion order within a batch
        assert sorted(answered) == sorted(c.id for c in calls), await request_report(bus, session, request)
        traffic.turn_done()

    closing = create_assistant_message("All done.")
    script.reply_uuids.append(closing.uuid)
    await bus.send_assistant(session, closing)
    thanks = str(uuid.uuid4())
    await bus.publish(session, UserPrompt(content="thanks", uuid=thanks), idempotency_key=thanks)
    script.prompt_uuids.append(thanks)
    script.expected_messages += 2
    await next_request()
    return script


# -- the cluster -----------------------------------------------------------------------------------


def pid_tag(worker: Worker) -> str:
    """Consumer and lease-owner names are ``<worker>-<host>-<pid>-<random>``."""
    return f"-{worker.process.pid}-"


def streams_of(bus: AgentbusClient, kind: str) -> list[str]:
    topology = bus.topology
    if kind == "tools":
        return topology.tool_job_streams()
    if kind == "ingestion":
        return topology.names.shard_streams("ingress")
    return topology.names.shard_streams("log")


async def pending_of(bus: AgentbusClient, worker: Worker) -> int:
    """Entries the worker's consumer has read and not acked yet, over every stream of its group."""
    group = GROUP_OF_WORKER[worker.name]
    pipe = bus.redis.pipeline(transaction=False)
    streams = streams_of(bus, worker.name)
    for stream in streams:
        pipe.xinfo_consumers(stream, group)
    total = 0
    for consumers in await pipe.execute():
        total += sum(int(c["pending"]) for c in consumers if pid_tag(worker) in id_text(c["name"]))
    return total


async def lease_owners(bus: AgentbusClient, group: str) -> tuple[list[str], list[str | None]]:
    """The live members of ``group``'s lane and the owner of each shard's lease."""
    names = bus.topology.names
    members = [id_text(m) for m in await bus.redis.zrange(names.lease_members_key(group), 0, -1)]
    owners = [await bus.redis.get(names.lease_key(group, shard)) for shard in range(names.shards)]
    return members, [id_text(o) if o is not None else None for o in owners]


async def balanced(bus: AgentbusClient, cluster: WorkerCluster) -> bool:
    """Every ordered lane has its two live instances as members and each shard at its rendezvous owner."""
    for kind in ("ingestion", "normalization", "transcripts"):
        group = GROUP_OF_WORKER[kind]
        members, owners = await lease_owners(bus, group)
        live = [m for m in members if any(pid_tag(w) in m for w in cluster.of(kind))]
        if len(live) != len(cluster.of(kind)):
            return False
        if owners != [preferred_owner(group, shard, live, len(owners)) for shard in range(len(owners))]:
            return False
    return True


async def owns_shards(bus: AgentbusClient, worker: Worker) -> bool:
    if worker.name == "tools":
        return True
    _, owners = await lease_owners(bus, GROUP_OF_WORKER[worker.name])
    return any(owner is not None and pid_tag(worker) in owner for owner in owners)


async def kill_mid_batch(bus: AgentbusClient, worker: Worker) -> int:
    """SIGKILL ``worker`` while it holds read-but-unacked entries; returns how many it held.

    The worker is frozen (SIGSTOP) the moment it is seen holding entries, so it cannot ack them between
    the look and the kill; if its batch was acked just before the freeze, it is thawed and watched again.
    """
    async with asyncio.timeout(60):
        while True:
            while await pending_of(bus, worker) == 0:
                await asyncio.sleep(0.002)
            os.kill(worker.process.pid, signal.SIGSTOP)
            await asyncio.sleep(0.05)  # commands already sent by the worker land meanwhile
            held = await pending_of(bus, worker)
            if held > 0:
                break
            os.kill(worker.process.pid, signal.SIGCONT)
    os.kill(worker.process.pid, signal.SIGKILL)
    await asyncio.to_thread(worker.process.wait)
    return held


async def unsettled(bus: AgentbusClient) -> list[str]:
    """The (stream, group) pairs that have not read and acked everything yet."""
    behind = []
    for kind, group in GROUP_OF_WORKER.items():
        for stream in streams_of(bus, kind):
            infos = await bus.redis.xinfo_groups(stream)
            info = next((i for i in infos if id_text(i["name"]) == group), None)
            if info is None or int(info["pending"]) != 0 or info.get("lag") != 0:
                held = await bus.redis.xpending_range(stream, group, "-", "+", 10)
                behind.append(f"{stream} {group}: {info} {held}")
    return behind


async def settle(bus: AgentbusClient, timeout_s: float = 30.0) -> None:
    with contextlib.suppress(TimeoutError):
        await eventually(lambda: _no(unsettled(bus)), timeout_s=timeout_s)
    assert await unsettled(bus) == []


async def _no(items: Awaitable[list[str]]) -> bool:
    return not await items


async def stall_report(bus: AgentbusClient, session: str, seq: int) -> str:
    """Why a session got no request after ``seq``: its log tail, the groups behind, the dead letters."""
    tail = [f"{e.seq} {e.message.type} {e.message.to_wire_json()[:200]}" for e in (await bus.history(session))[-6:]]
    lines = [f"no request for {session} after seq {seq}", "log tail:", *tail, "behind:", *await unsettled(bus)]
    return "\n".join([*lines, "dead letters:", *await dead_letters(bus)])


async def request_report(bus: AgentbusClient, session: str, request: PublishedRequest) -> str:
    """A request answering only some calls of its turn: its seq, its last messages, and the session log
    tail with each entry's tool blocks (seen once under full-suite load; kept to tell the cause next time)."""

    def blocks(message: object) -> list[tuple[str, str | None]]:
        found = []
        for block in getattr(message, "blocks", []):
            if isinstance(block, ToolUseBlock):
                found.append(("tool_use", block.id))
            elif isinstance(block, ToolResultBlock):
                found.append(("tool_result", block.tool_use_id))
        return found

    last = [
        (m["role"], m["content"] if isinstance(m["content"], str) else len(m["content"]))
        for m in request.request["messages"][-3:]
    ]
    tail = [f"{e.seq} {e.message.type} {blocks(e.message)}" for e in (await bus.history(session))[-12:]]
    return "\n".join([f"request seq {request.seq} of {session}; last messages {last}", "log tail:", *tail])


# -- the checks ------------------------------------------------------------------------------------


def text_of(block: ToolResultBlock) -> str:
    content = block.content
    if isinstance(content, str):
        return content
    return " ".join(getattr(part, "text", "") for part in content or [])


async def check_session(bus: AgentbusClient, cluster: WorkerCluster, script: Script) -> None:
    session = script.session
    history = await bus.history(session)

    # The log: seqs 1..n exactly once, in the session stream and in the shard log.
    assert [e.seq for e in history] == list(range(1, len(history) + 1)), session
    shard_log = [
        parse_log_entry(fields[b"data"]) for _, fields in await bus.redis.xrange(bus.topology.log_for(session))
    ]
    assert [e.seq for e in shard_log if e.session_id == session] == [e.seq for e in history], session

    messages = [e.message for e in history if not isinstance(e.message, ProgressMessage)]
    assert all(isinstance(m, UserMessage | AssistantMessage) for m in messages), session
    uuids = Counter(m.uuid for m in messages)  # type: ignore[union-attr]
    assert [u for u, n in uuids.items() if n > 1] == [], session
    assert len(messages) == script.expected_messages, session
    for sent in script.prompt_uuids + script.reply_uuids:
        assert uuids[sent] == 1, (session, sent)
    streamed = Counter(m.api_message_id for m in messages if isinstance(m, AssistantMessage))
    for message_id in script.streamed_ids:
        assert streamed[message_id] >= 2, (session, message_id)  # text block + tool_use blocks

    # Every call answered exactly once, by the tool that ran it.
    uses = [b.id for m in messages if isinstance(m, AssistantMessage) for b in m.blocks if isinstance(b, ToolUseBlock)]
    assert uses == script.call_order, session
    results = [b for m in messages if isinstance(m, UserMessage) for b in m.blocks if isinstance(b, ToolResultBlock)]
    assert Counter(r.tool_use_id for r in results) == Counter(script.calls.keys()), session
    for result in results:
        assert not result.is_error, (session, text_of(result))
        assert SYNTHETIC_TOOL_RESULT_PLACEHOLDER not in text_of(result), (session, result)
        assert script.calls[result.tool_use_id] in text_of(result), (session, result)

    # The last request is the shared/ rules applied to the log, and the API would accept it.
    assert script.last_request is not None
    latest = await bus.latest_request(session)
    assert latest is not None, session
    assert latest.seq == history[-1].seq, session
    expected = to_api_request([e.message for e in history], options=WORKER_OPTIONS).request
    assert latest.request == expected, request_diff(session, latest.request, expected)
    assert validate_api_request(latest.request) == [], session

    # The transcript: each persisted message of the log once, in log order, chained as logged.
    path = session_file(cluster.data_dir, cluster.cwd, session)
    lines = [json.loads(line) for line in path.read_text().splitlines()]
    assert [line["uuid"] for line in lines] == [m.uuid for m in messages], session  # type: ignore[union-attr]
    logged_parents = {m.uuid: m.parent_uuid for m in messages}  # type: ignore[union-attr]
    assert [line["parentUuid"] for line in lines] == [logged_parents[line["uuid"]] for line in lines], session


def request_diff(session: str, published: object, expected: object) -> str:
    """The differing lines of two requests, one message per line."""
    lines = [
        [json.dumps(m, sort_keys=True) for m in request["messages"]]  # type: ignore[index]
        for request in (published, expected)
    ]
    diff = difflib.unified_diff(lines[0], lines[1], lineterm="", n=1)
    return "\n".join([f"{session}: published (-) vs rules applied to the log (+)", *diff])


async def dead_letters(bus: AgentbusClient) -> list[str]:
    found = []
    for stream in await dead_letter_streams(bus.redis, bus.topology.names):
        found += [
            f"{stream}: {d.group}/{d.consumer} {d.reason} {d.detail}"
            for d in await list_dead_letters(bus.redis, stream)
        ]
    return found


# -- the test --------------------------------------------------------------------------------------


@pytest.mark.timeout(240)
@on_targets("kind", ["ingestion", "tools", "normalization", "transcripts"], cluster_cases=["ingestion", "tools"])
async def test_sigkill_mid_batch_loses_nothing_and_duplicates_nothing(cluster: WorkerCluster, kind: str) -> None:
    """Issue 4 "Done when": SIGKILL of a worker of each type mid-batch (at-least-once delivery with
    reclaim + idempotent consumers = effectively-once, R7.7 transcript de-dup, R8.1 one result per call)."""
    await run_disruption(cluster, kind, kill_mid_batch)


@pytest.mark.timeout(240)
@on_targets("kind", ["ingestion", "normalization", "transcripts"], cluster_cases=["normalization"])
async def test_owner_paused_past_its_lease_mid_batch_is_fenced_out(cluster: WorkerCluster, kind: str) -> None:
    """Fencing (ecosystem.md §5.3 point 3): an ordered-lane owner frozen (SIGSTOP) with a batch in hand
    until another instance owns its shards, then thawed, finishes that batch into a refused write — the
    lease epoch moved on — and loses nothing and duplicates nothing: the log, the requests and the
    transcripts (whose session files it holds locked until it lets the shard go) stay exact."""
    await run_disruption(cluster, kind, pause_mid_batch)
    assert "consumer_fenced_out" in cluster.logs()


async def pause_mid_batch(bus: AgentbusClient, worker: Worker) -> int:
    """Freeze ``worker`` while it holds read-but-unacked entries, keep it frozen until none of its
    lane's shards is its own any more, then let it run on; returns how many entries it held."""
    async with asyncio.timeout(60):
        while True:
            while await pending_of(bus, worker) == 0:
                await asyncio.sleep(0.002)
            os.kill(worker.process.pid, signal.SIGSTOP)
            await asyncio.sleep(0.05)
            held = await pending_of(bus, worker)
            if held > 0:
                break
            os.kill(worker.process.pid, signal.SIGCONT)
    group = GROUP_OF_WORKER[worker.name]
    _, before = await lease_owners(bus, group)
    its_shards = [shard for shard, owner in enumerate(before) if owner is not None and pid_tag(worker) in owner]

    async def taken_over() -> bool:
        # Not merely expired: another instance holds each of its shards now (a newer epoch).
        _, owners = await lease_owners(bus, group)
        return all(owners[s] is not None and pid_tag(worker) not in owners[s] for s in its_shards)  # type: ignore[operator]

    await eventually(taken_over, timeout_s=30)
    os.kill(worker.process.pid, signal.SIGCONT)
    return held


async def run_disruption(
    cluster: WorkerCluster, kind: str, disrupt: Callable[[AgentbusClient, Worker], Awaitable[int]]
) -> None:
    """Steady traffic through one instance of each type, scaled to two, then ``disrupt`` one instance of
    ``kind`` mid-batch; afterwards every session must be exact (``check_session``)."""
    scripts = [Script(session=f"crash-{kind}-{index:02d}") for index in range(SESSIONS)]
    cluster.workspace.mkdir(parents=True, exist_ok=True)
    for script in scripts:
        (cluster.workspace / f"{script.session}.txt").write_text(f"read-me {script.session}\n")
    # A tool that times out under machine load would be a correct is_error result, not what is tested here.
    cluster.extra_env.update(RELAXED_TOOL_LIMITS)
    cluster.start_all(instances=1)
    traffic = Traffic()
    async with cluster.client() as bus:
        producers = asyncio.gather(*(converse(bus, script, traffic) for script in scripts))
        try:
            await traffic.wait_turns(SESSIONS)
            # Scale out while traffic flows: the first instances hand shards over to the new ones.
            first = {name: cluster.of(name)[0] for name in GROUP_OF_WORKER}
            for name in GROUP_OF_WORKER:
                cluster.start(name)
            await asyncio.to_thread(cluster.wait_ready)
            await eventually(lambda: balanced(bus, cluster), timeout_s=30)
            await traffic.wait_turns(traffic.turns + SESSIONS)
            # Kill the newer instance, so its shards go back to the one that had them before; if the
            # newer one won no shard of this lane, kill the older one.
            newer = next(w for w in cluster.of(kind) if w is not first[kind])
            victim = newer if await owns_shards(bus, newer) else first[kind]
            assert await disrupt(bus, victim) > 0
            await traffic.wait_turns(traffic.turns + SESSIONS * TURNS_AFTER_KILL)
            traffic.stop.set()
            await producers
        finally:
            if not producers.done():
                producers.cancel()
                with contextlib.suppress(BaseException):
                    await producers
        await settle(bus)
        for script in scripts:
            await check_session(bus, cluster, script)
        letters = await dead_letters(bus)
        assert letters == [], "\n".join(letters[:5]) + "\n" + cluster.logs()[-8000:]
