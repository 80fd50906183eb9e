"""Issue 19 "Done when", last line: SIGKILL of any worker during the multi-agent scenario loses nothing and
duplicates nothing.

The scenario of ``test_subagents_model.py`` (a parent starts three children in parallel through the Agent
tool; one runs tools, one asks for approval and a person allows it, one is interrupted while its reply
streams) runs on a deployment with TWO instances of every worker type — ingestion, normalization,
transcripts, tools, model — so a SIGKILLed worker has a surviving peer that takes over what it held: a
lane's shards once their lease expires (``AGENTBUS_LANE__LEASE_TTL_MS``), a tool job or a request notice
once its entry idled past ``AGENTBUS_CONSUMER__CLAIM_MIN_IDLE_MS`` (kept fresh by the live holder), a
session's model call once its call lease expires (``AGENTBUS_MODEL__SESSION_LEASE_MS``). Each kill is
aimed at the process holding the work at that moment (the lease owner, the consumer with the pending job,
the in-flight record's owner), and a replacement of the killed kind is started at once so the counts
recover. Each test kills one worker kind at its dangerous moments:

- ``model``: the parent's reply with an Agent call is half streamed (tombstoned, called again: the
  half-streamed Agent call starts no child); a child's reply is half streamed (tombstoned, called again,
  then interrupted).
- ``tools``: the parent's job is in flight after its Agent calls launched the children (the job is re-run
  by the peer: no second child, the parent's side-effecting Bash ran once); a child's Bash runs.
- ``lanes``: ingestion while a child's tool activity is being relayed to its parent; normalization and
  transcripts mid-scenario.

Nothing lost, nothing duplicated, concretely: every tool_use of every session answered exactly once; no
log entry or transcript line twice (uuids); each child launched once (one record, one prompt) and no child
for the tombstoned Agent call; the fake server called exactly as often as the script says (a re-call only
where a model worker died mid-stream); each side-effecting command ran once (its file holds one line); the
approval resolved once; the parent saw each child's tool activity as progress once; four transcripts that
verify; usage rolled up with each answered call counted once; no dead letters.
"""

from __future__ import annotations

import asyncio
import json
import signal
import time
import urllib.error
import urllib.request
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from agentbus_redis.agents.ids import agent_id_for, child_session_id
from agentbus_redis.agents.turn import shows_tool_activity
from agentbus_redis.bus.events import LogEntry
from agentbus_redis.cli.transcript import app as transcript_cli
from agentbus_redis.json_types import JsonObject
from agentbus_redis.messages.constants import REJECT_MESSAGE, SYNTHETIC_TOOL_RESULT_PLACEHOLDER
from agentbus_redis.messages.content import ToolResultBlock
from agentbus_redis.messages.kinds import AssistantMessage, ProgressMessage, UserMessage
from agentbus_redis.sdk.client import AgentbusClient
from agentbus_redis.stores.approvals import ApprovalStore
from agentbus_redis.streams.names import DEAD_LETTER_SUFFIX
from agentbus_redis.streams.topology import (
    INGESTION_GROUP,
    NORMALIZATION_GROUP,
    TRANSCRIPTS_GROUP,
    Topology,
)
from agentbus_redis.subagents.store import AgentStore
from agentbus_redis.transcript import read_transcript, verify_transcript
from agentbus_redis.transcript_files.layout import session_file
from tests.integration.approval_helpers import APPROVE_ENV
from tests.integration.cluster import Worker, WorkerCluster, eventually
from tests.integration.fake_model import FakeModelProcess
from tests.integration.model_turns import (
    assert_every_tool_use_answered_once,
    calls_settled,
    live_messages,
    reply,
    text,
    text_of,
    tombstones,
    tool_use,
    turn_ended,
    wait_for,
)
from tests.integration.work_holders import await_job_holder, lane_owner, model_caller

pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.timeout(600)]

USAGE = {"input_tokens": 100, "output_tokens": 20}
WORKER_KINDS = ("ingestion", "normalization", "transcripts", "tools", "model")
CALL_LEASE_MS = 1500


@pytest.fixture(scope="module")
def deployment(module_cluster: WorkerCluster, fake: FakeModelProcess) -> WorkerCluster:
    module_cluster.extra_env.update(
        {
            **APPROVE_ENV,
            "AGENTBUS_TOOLS__DEADLINE_S": "180",
            "AGENTBUS_AGENTS__WALL_TIME_S": "170",
            "ANTHROPIC_API_KEY": "sk-ant-test",
            "AGENTBUS_MODEL__BASE_URL": fake.base_url,
            "AGENTBUS_MODEL__MODEL": "claude-sonnet-4-6",
            "AGENTBUS_MODEL__SESSION_LEASE_MS": str(CALL_LEASE_MS),
            "LOG_LEVEL": "INFO",
        }
    )
    for name in WORKER_KINDS:
        module_cluster.start(name, 2)
    module_cluster.wait_ready(timeout_s=240)
    (module_cluster.workspace / "README.md").write_text("# demo\n", encoding="utf-8")
    return module_cluster


@dataclass
class Kills:
    """The kills of one run, by moment, and what was killed (for the report of a failure)."""

    at: frozenset[str]
    done: list[str] = field(default_factory=list)

    def __contains__(self, moment: str) -> bool:
        return moment in self.at

    def kill(self, cluster: WorkerCluster, moment: str, worker: Worker) -> None:
        """SIGKILL ``worker`` and start a replacement of its kind (its peer takes over meanwhile)."""
        cluster.kill(worker)
        cluster.start(worker.name)
        self.done.append(f"{moment}: {worker.name} pid {worker.process.pid}")


async def ready(cluster: WorkerCluster) -> None:
    """Every live worker answers /readyz, two of each kind (the replacements of the killed ones included)."""

    async def all_ready() -> bool:
        died = [w for w in cluster.workers if w.process.poll() not in (None, -signal.SIGKILL)]
        if died:  # not one the test killed: it will not come back, say why at once
            raise RuntimeError("\n".join(f"{w.name} exited: {w.log_path.read_text()[-2000:]}" for w in died))
        for worker in [w for w in cluster.workers if w.process.poll() is None]:
            try:
                url = f"http://127.0.0.1:{worker.port}/readyz"
                await asyncio.to_thread(urllib.request.urlopen, url, timeout=1)
            except (urllib.error.URLError, OSError):
                return False
        return all(len(cluster.of(name)) == 2 for name in WORKER_KINDS)

    await eventually(all_ready, timeout_s=240, interval_s=0.2)


# -- the scenario -------------------------------------------------------------------------------------


def agent(tool_id: str, description: str, prompt: str) -> JsonObject:
    return tool_use(tool_id, "Agent", description=description, prompt=prompt)


def has_text(needle: str) -> Callable[[list[LogEntry]], bool]:
    return lambda history: any(needle in json.dumps(e.message.to_wire()) for e in history)


def live_call(tool_id: str) -> Callable[[list[LogEntry]], bool]:
    """``tool_id``'s tool_use is in the log (not tombstoned)."""

    def logged(history: list[LogEntry]) -> bool:
        return any(
            isinstance(m, AssistantMessage) and any(getattr(b, "id", None) == tool_id for b in m.blocks)
            for m in live_messages(history)
        )

    return logged


def answered(tool_id: str) -> Callable[[list[LogEntry]], bool]:
    return lambda history: any(
        isinstance(m, UserMessage) and tool_id in json.dumps(m.to_wire()) and "tool_result" in json.dumps(m.to_wire())
        for m in live_messages(history)
    )


async def run_scenario(deployment: WorkerCluster, fake: FakeModelProcess, parent: str, kills: Kills) -> dict[str, Any]:
    """Play the scenario with the kills asked for; return what the assertions need."""
    workspace = deployment.workspace
    files = {name: f"{parent}-{name}.log" for name in ("parent", "a", "b")}
    child = {tool_id: child_session_id(parent, agent_id_for(parent, tool_id)) for tool_id in ("t_a", "t_b", "t_c")}
    launch = reply(
        text("Starting three agents."),
        agent("t_a", "read and log", "Read README.md, then log it."),
        agent("t_b", "touch b", "Append x to the b file."),
        agent("t_c", "long story", "Tell a long story."),
        tool_use("t_p_log", "Bash", command=f"sleep 2; echo p >> {files['parent']}"),
        usage=USAGE,
    )
    parent_steps = [launch, reply(text("Two agents reported; one was stopped."), usage=USAGE)]
    if "parent_stream" in kills:
        # The first call streams an Agent call, then slowly more: killed mid-stream, it is tombstoned and the
        # request called again (the second step). The half-streamed Agent call must never start a child.
        half = reply(
            text("Starting agents."),
            agent("t_dead", "never", "This call is tombstoned."),
            text("Planning."),  # its end releases the Agent call's message to the log (the last one is held)
            text("Planning. " * 300),
            chunk_delay_ms=200,
            chunk_chars=60,
            usage=USAGE,
        )
        parent_steps.insert(0, half)
    fake.script(parent, parent_steps)
    fake.script(
        child["t_a"],
        [
            reply(
                tool_use("t_a_read", "Read", file_path="README.md"),
                tool_use("t_a_log", "Bash", command=f"sleep 2; echo a >> {files['a']}"),
                usage=USAGE,
            ),
            reply(text("README says: # demo"), usage=USAGE),
        ],
    )
    # B's command matches no allow rule: it asks (H2) and a person allows it.
    fake.script(
        child["t_b"],
        [
            reply(tool_use("t_b_touch", "Bash", command=f"printf x >> {files['b']}"), usage=USAGE),
            reply(text("two"), usage=USAGE),
        ],
    )
    # A block is logged when the next one ends: the first is logged early, the third streams for a minute.
    story = reply(
        text("Once upon a time."), text("There was a bus."), text("And then " * 400), chunk_delay_ms=300, usage=USAGE
    )
    fake.script(child["t_c"], [story, story] if "child_stream" in kills else [story])

    async with deployment.client() as bus:
        await bus.send_prompt(parent, "Run three agents.")
        if "parent_stream" in kills:
            await wait_for(bus, parent, live_call("t_dead"))
            kills.kill(deployment, "parent_stream", await model_caller(bus, deployment, parent))

        store = AgentStore(bus.redis, Topology(deployment.names))

        async def launched() -> bool:
            return all([await store.record(session) is not None for session in child.values()])

        await eventually(launched, timeout_s=90)
        if "agent_job" in kills:
            # The parent's job is in flight: its Agent calls launched the children, its Bash sleeps.
            kills.kill(deployment, "agent_job", await await_job_holder(bus, deployment, parent))
        if "normalization" in kills:
            worker = await lane_owner(bus, deployment, NORMALIZATION_GROUP, parent)
            kills.kill(deployment, "normalization", worker)

        # A reads, then runs a slow Bash that appends one line.
        await wait_for(bus, child["t_a"], live_call("t_a_log"), timeout_s=90)
        if "ingestion_relay" in kills:
            # A's tool calls were just committed: their relay to the parent (progress) is under way.
            kills.kill(deployment, "ingestion_relay", await lane_owner(bus, deployment, INGESTION_GROUP, child["t_a"]))
        if "transcripts" in kills:
            kills.kill(deployment, "transcripts", await lane_owner(bus, deployment, TRANSCRIPTS_GROUP, child["t_a"]))
        if "child_tool" in kills:
            await wait_for(bus, child["t_a"], answered("t_a_read"), timeout_s=60)
            kills.kill(deployment, "child_tool", await await_job_holder(bus, deployment, child["t_a"]))

        # C streams its story slowly; it is interrupted while its reply streams.
        await wait_for(bus, child["t_c"], has_text("Once upon a time."), timeout_s=90)
        if "child_stream" in kills:
            kills.kill(deployment, "child_stream", await model_caller(bus, deployment, child["t_c"]))

            def called_again(history: list[LogEntry]) -> bool:
                return bool(tombstones(history)) and any(
                    text_of(m) == "Once upon a time." for m in live_messages(history)
                )

            await wait_for(bus, child["t_c"], called_again, timeout_s=90)
        await bus.interrupt(child["t_c"])

        async def asked() -> bool:
            return bool(await bus.pending_approvals(child["t_b"]))

        try:
            # Generous: B's call may wait for a killed tool worker's jobs to be claimed again by its replacement.
            await eventually(asked, timeout_s=180)
        except TimeoutError:
            # Say where B stopped, and what the workers said (their tails), so a failure here can be read.
            b_types = [entry.message.type for entry in await bus.history(child["t_b"])]
            tails = "\n".join(
                f"== {w.name}:{w.port} (exit {w.process.poll()})\n"
                + "\n".join(w.log_path.read_text(errors="replace").splitlines()[-40:])
                for w in deployment.workers
            )
            raise AssertionError(f"B never asked; its log: {b_types}\n{tails}") from None
        (approval,) = await bus.pending_approvals(child["t_b"])
        await approval.allow()

        histories = {parent: await wait_for(bus, parent, turn_ended, timeout_s=180)}
        for session in child.values():
            histories[session] = await bus.history(session)
        await calls_settled(
            bus.redis, bus.topology, parent, *child.values()
        )  # the last call's usage lands just after its reply
        usage = {session: await bus.usage(session) for session in [parent, *child.values()]}
        tree = await bus.tree_usage(parent)
        children = await store.children(parent)
        dead_child = await store.record(child_session_id(parent, agent_id_for(parent, "t_dead")))
        approvals_resolved = await approval_decisions(bus, approval.approval_id)
        dead_letters = await dead_letter_count(bus)
    return {
        "child": child,
        "files": {name: workspace / path for name, path in files.items()},
        "histories": histories,
        "usage": usage,
        "tree": tree,
        "children": children,
        "dead_child": dead_child,
        "approvals_resolved": approvals_resolved,
        "dead_letters": dead_letters,
    }


async def approval_decisions(bus: AgentbusClient, approval_id: str) -> int:
    """How often the approval was decided (the approval events stream, ``decided`` events)."""
    stream = ApprovalStore(bus.redis, bus.topology).events_stream
    rows: Any = await bus.redis.xrange(stream)
    return sum(1 for _, f in rows if f.get(b"approval_id") == approval_id.encode() and f.get(b"event") == b"decided")


async def dead_letter_count(bus: AgentbusClient) -> dict[str, int]:
    """Every non-empty dead-letter stream and its length."""
    found: dict[str, int] = {}
    async for key in bus.redis.scan_iter(match=f"*{DEAD_LETTER_SUFFIX}", count=1000):
        length = await bus.redis.xlen(key)
        if length:
            found[key.decode()] = length
    return found


# -- the assertions -------------------------------------------------------------------------------------


async def assert_nothing_lost_nothing_duplicated(
    deployment: WorkerCluster, fake: FakeModelProcess, parent: str, kills: Kills, run: dict[str, Any]
) -> None:
    child: dict[str, str] = run["child"]
    histories: dict[str, list[LogEntry]] = run["histories"]
    context = f"kills: {kills.done}"

    for session, history in histories.items():
        assert_every_tool_use_answered_once(history)
        uuids = Counter(uuid for e in history if (uuid := getattr(e.message, "uuid", None)) is not None)
        assert [u for u, n in uuids.items() if n > 1] == [], f"{session}: a log entry twice; {context}"

    # Each child launched once: one record each (three in all), one prompt each; no child of the tombstoned call.
    assert sorted(run["children"]) == sorted(child.values()), context
    assert run["dead_child"] is None, context
    for tool_id, session in child.items():
        prompts = [
            m
            for m in live_messages(histories[session])
            if isinstance(m, UserMessage) and isinstance(m.message.content, str)
        ]
        assert len(prompts) == 1, (tool_id, [text_of(p) for p in prompts], context)

    # The model was called as the script says: once per request, plus one re-call where a worker died mid-stream.
    expected_calls = {
        parent: 3 if "parent_stream" in kills else 2,
        child["t_a"]: 2,
        child["t_b"]: 2,
        child["t_c"]: 2 if "child_stream" in kills else 1,
    }
    assert {s: len(fake.requests(s)) for s in expected_calls} == expected_calls, context
    # The half-streamed reply is tombstoned, not kept beside the whole one.
    story = [m for m in live_messages(histories[child["t_c"]]) if text_of(m) == "Once upon a time."]
    assert len(story) == 1, context

    # Each side effect happened at most once, and exactly once unless a kill cut its call short: a call an
    # earlier attempt started is answered with the missing-result placeholder, never run a second time.
    files = run["files"]
    for name, session, tool_id, line in (("parent", parent, "t_p_log", "p\n"), ("a", child["t_a"], "t_a_log", "a\n")):
        answer = result_of(histories[session], tool_id)
        ran_text = files[name].read_text() if files[name].exists() else ""
        assert ran_text in ("", line), (name, ran_text, context)
        if answer.content != SYNTHETIC_TOOL_RESULT_PLACEHOLDER:
            assert (ran_text, answer.is_error) == (line, None), (name, answer, context)
    assert files["b"].read_text() == "x", context
    assert run["approvals_resolved"] == 1, context

    # The parent's last request pairs every Agent call with its result (A5.2, A8.1).
    last_request = fake.requests(parent)[-1]["body"]
    results = {
        block["tool_use_id"]: block
        for message in last_request["messages"]
        if message["role"] == "user" and isinstance(message["content"], list)
        for block in message["content"]
        if block.get("type") == "tool_result"
    }
    assert sorted(results) == ["t_a", "t_b", "t_c", "t_p_log"], context
    assert results["t_a"]["content"][0] == {"type": "text", "text": "README says: # demo"}, context
    assert "\ntool_uses: 2\n" in results["t_a"]["content"][1]["text"], context
    assert results["t_b"]["content"][0] == {"type": "text", "text": "two"}, context
    assert (results["t_c"]["content"], results["t_c"]["is_error"]) == (REJECT_MESSAGE, True), context

    # A6: the parent saw each of A's messages with tool activity as progress, once: its prompt, its calls and
    # their results.
    relayed = Counter(
        str(json.loads(json.dumps(e.message.data))["message"]["uuid"])
        for e in histories[parent]
        if isinstance(e.message, ProgressMessage)
        and e.message.parent_tool_use_id == "t_a"
        and e.message.data.get("type") == "agent_progress"
    )
    child_log = histories[child["t_a"]]
    shown = [
        getattr(e.message, "uuid", None)
        for e in child_log
        if (e.seq == 1 and e.message.type == "user") or shows_tool_activity(e.message)
    ]
    assert relayed == Counter(shown), (relayed, shown, context)

    # Four valid transcripts: the parent's and three sidechain files, no line twice.
    main = session_file(deployment.data_dir, deployment.cwd, parent)
    paths = [main] + [
        main.with_suffix("") / "subagents" / f"agent-{agent_id_for(parent, tool_id)}.jsonl" for tool_id in child
    ]

    async def all_valid() -> bool:
        return all(path.exists() and verify_transcript(read_transcript(path.read_bytes())).ok for path in paths)

    try:
        await eventually(all_valid, timeout_s=60)
    except TimeoutError:
        raise AssertionError(f"{transcript_report(paths)}\n{log_report(histories)}\n{context}") from None
    verified = CliRunner().invoke(transcript_cli, ["verify", "--tree", str(main)])
    assert verified.exit_code == 0, (verified.output, context)
    for path in paths:
        lines = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
        counted = Counter(line.get("uuid") for line in lines if line.get("uuid"))
        assert [u for u, n in counted.items() if n > 1] == [], (path.name, context)

    # Usage rolled up, each answered call once (a call cut by a kill or an interrupt reported no usage).
    answered_calls = {parent: 2, child["t_a"]: 2, child["t_b"]: 2, child["t_c"]: 0}
    assert {s: run["usage"][s].total.requests for s in answered_calls} == answered_calls, context
    tree = run["tree"]
    assert (tree.total.requests, tree.total.input_tokens) == (6, 600), context
    assert run["dead_letters"] == {}, context


def result_of(history: list[LogEntry], tool_id: str) -> ToolResultBlock:
    (block,) = [
        b
        for m in live_messages(history)
        if isinstance(m, UserMessage)
        for b in m.blocks
        if isinstance(b, ToolResultBlock) and b.tool_use_id == tool_id
    ]
    return block


def transcript_report(paths: list[Path]) -> str:
    """Why each transcript does not verify (for a failure's message)."""
    lines = []
    for path in paths:
        if not path.exists():
            lines.append(f"{path.name}: missing")
            continue
        issues = verify_transcript(read_transcript(path.read_bytes())).issues
        lines.append(f"{path.name}: {[str(issue) for issue in issues]}")
    return "\n".join(lines)


def log_report(histories: dict[str, list[LogEntry]]) -> str:
    """Each session's log: seq, type, uuid, parentUuid, text (for a failure's message)."""
    lines = []
    for session, history in histories.items():
        lines.append(f"== {session}")
        for e in history:
            wire: Any = e.message.to_wire()
            lines.append(
                f"{e.seq} {e.message.type} {wire.get('uuid')} <- {wire.get('parentUuid')} {text_of(e.message)[:40]!r}"
            )
    return "\n".join(lines)


# -- the tests -----------------------------------------------------------------------------------------


async def scenario_survives(deployment: WorkerCluster, fake: FakeModelProcess, parent: str, moments: set[str]) -> None:
    kills = Kills(frozenset(moments))
    started = time.monotonic()
    try:
        run = await run_scenario(deployment, fake, parent, kills)
        await assert_nothing_lost_nothing_duplicated(deployment, fake, parent, kills, run)
    finally:
        await ready(deployment)
    assert len(kills.done) == len(moments), kills.done
    print(f"{parent}: {kills.done} in {time.monotonic() - started:.1f}s")


async def test_sigkill_of_model_workers_mid_stream_of_the_parents_agent_reply_and_of_a_childs_reply(
    deployment: WorkerCluster, fake: FakeModelProcess
) -> None:
    await scenario_survives(deployment, fake, "crash-model", {"parent_stream", "child_stream"})


async def test_sigkill_of_tool_workers_with_the_agent_job_in_flight_and_while_a_childs_tool_runs(
    deployment: WorkerCluster, fake: FakeModelProcess
) -> None:
    await scenario_survives(deployment, fake, "crash-tools", {"agent_job", "child_tool"})


async def test_sigkill_of_ingestion_while_relaying_and_of_normalization_and_transcripts_mid_scenario(
    deployment: WorkerCluster, fake: FakeModelProcess
) -> None:
    await scenario_survives(deployment, fake, "crash-lanes", {"ingestion_relay", "normalization", "transcripts"})
