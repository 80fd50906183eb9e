"""Issue 19's sub-agents under the least-privilege Redis users of deploy/redis/users.acl, as compose and k8s
run the workers: each worker type connects as its own ACL user, producers (the SDK and ``agentbus``) as
``producer``.

- End to end (real workers, the fake model server): a parent runs a foreground child with a tool call (A1,
  A5), a background child whose ``<task-notification>`` arrives (A5.3, A5.4), continues the foreground child
  with ``SendMessage`` (A4.4) whose Bash call asks and is allowed with ``agentbus approvals allow`` as the
  producer (H8.1); ``agentbus usage --tree`` and ``tail --tree`` run as the producer (A4); ``agentbus agents
  stop`` as the producer kills a background child (A8.3). No worker log has a ``NOPERM``, no dead letter.
- Key by key: each worker's part of the sub-agent store, run by the real code as that worker's user —
  including the paths the end-to-end run may not reach (the ingestion sweep, the cancel marker written in
  the batch script, a fan-out release) — and what each user may NOT do (a producer cannot forge a child
  record, the tools user cannot rewrite a top-level session's config nor read its log, the transcripts
  user cannot end a child).
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import redis.asyncio as aioredis
from redis.exceptions import NoPermissionError

from agentbus_redis.agents.background import output_file_path
from agentbus_redis.agents.ids import agent_id_for, child_session_id
from agentbus_redis.agents.results import interrupted_result
from agentbus_redis.bus.events import LogEntry
from agentbus_redis.messages.constants import USER_REJECTED_TOOL_USE
from agentbus_redis.model.session_config import SessionModelConfig
from agentbus_redis.runtime.key_calls import KeyCalls
from agentbus_redis.streams.names import StreamNames
from agentbus_redis.streams.topology import Topology
from agentbus_redis.subagents.ingestion_hooks import CANCEL_MARKER_TTL_MS
from agentbus_redis.subagents.relay import ChildRelay
from agentbus_redis.subagents.stop import resolve_running_child
from agentbus_redis.subagents.store import AgentStore
from agentbus_redis.subagents.tree import session_tree
from tests.cli.process import agentbus, cli_env
from tests.integration.child_records import child_record
from tests.integration.cluster import eventually
from tests.integration.fake_model import FakeModelProcess
from tests.integration.model_turns import (
    assert_every_tool_use_answered_once,
    reply,
    text,
    tool_use,
    turn_ended,
    wait_for,
)
from tests.integration.test_ingress_door import AclCluster
from tests.services.acl_redis import ACL_FILE, AclRedis, start_acl_redis

pytestmark = [pytest.mark.integration, pytest.mark.slow, pytest.mark.timeout(600)]

USAGE = {"input_tokens": 100, "output_tokens": 20}


# -- end to end --------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def acl_deployment(tmp_path_factory: pytest.TempPathFactory, fake: FakeModelProcess) -> Iterator[AclCluster]:
    root = tmp_path_factory.mktemp("subagents-acl")
    server = start_acl_redis(root / "redis")
    cluster = AclCluster(redis_url=server.url("operator"), root=root)
    cluster.acl = server
    cluster.extra_env.update(
        {
            "ANTHROPIC_API_KEY": "sk-ant-test",
            "AGENTBUS_MODEL__BASE_URL": fake.base_url,
            "AGENTBUS_MODEL__MODEL": "claude-sonnet-4-6",
            "AGENTBUS_TOOLS__ASK_POLICY": "approve",
            "AGENTBUS_TOOLS__APPROVAL_TIMEOUT_S": "600",
            "AGENTBUS_TOOLS__TIMEOUT_S": "120",
            "AGENTBUS_TOOLS__DEADLINE_S": "300",
            "AGENTBUS_RATE_LIMIT__REQUESTS_PER_MIN": "600",
            "AGENTBUS_RATE_LIMIT__TOKENS_PER_MIN": "10000000",
        }
    )
    try:
        for name in ("ingestion", "normalization", "transcripts", "tools", "model"):
            cluster.start(name)
        cluster.wait_ready(timeout_s=240)
        (cluster.workspace / "README.md").write_text("# acl\n", encoding="utf-8")
        yield cluster
    finally:
        cluster.stop()
        server.stop()


def agent(tool_id: str, description: str, prompt: str, *, background: bool = False) -> dict[str, Any]:
    arguments: dict[str, Any] = {"description": description, "prompt": prompt}
    if background:
        arguments["run_in_background"] = True
    return tool_use(tool_id, "Agent", **arguments)


def tool_results(request_body: dict[str, Any]) -> dict[str, Any]:
    return {
        block["tool_use_id"]: block
        for message in request_body["messages"]
        if message["role"] == "user" and isinstance(message["content"], list)
        for block in message["content"]
        if block.get("type") == "tool_result"
    }


def mentioning(needle: str) -> Callable[[list[LogEntry]], bool]:
    """A log predicate: ``needle`` appears in one of its messages."""
    return lambda history: needle in json.dumps([entry.message.to_wire() for entry in history])


def said(request_body: dict[str, Any]) -> str:
    return json.dumps(request_body["messages"])


def producer_cli(cluster: AclCluster, *args: str) -> str:
    """``agentbus ARGS`` with the producer's credential; its stdout (asserts it succeeded)."""
    env = cli_env(cluster.acl.url("producer"), AGENTBUS_SHARDS=str(cluster.names.shards))
    outcome = agentbus(*args, cwd=cluster.root, env=env, timeout_s=120)
    assert outcome.code == 0, outcome.stderr
    assert "NOPERM" not in outcome.stderr
    return outcome.stdout


async def assert_no_noperm_and_no_dead_letters(cluster: AclCluster) -> None:
    assert cluster.alive(), cluster.logs()[-4000:]
    logs = cluster.logs()
    assert "NOPERM" not in logs, logs[logs.index("NOPERM") - 2000 :][:4000]
    operator = cluster.operator()
    try:
        letters = {key: await operator.xlen(key) async for key in operator.scan_iter(match="agentbus:*dlq*")}
    finally:
        await operator.aclose()
    assert not any(letters.values()), letters


async def test_a1_a4_4_a5_h8_1_foreground_background_send_message_and_an_approval_under_the_worker_acl_users(
    acl_deployment: AclCluster, fake: FakeModelProcess
) -> None:
    cluster = acl_deployment
    parent = "acl-agents"
    fg_id, bg_id = agent_id_for(parent, "t_fg"), agent_id_for(parent, "t_bg")
    fg, bg = child_session_id(parent, fg_id), child_session_id(parent, bg_id)
    fake.script(
        parent,
        [
            reply(
                text("Starting two agents."),
                agent("t_fg", "read readme", "Read README.md."),
                agent("t_bg", "say hi", "Say hi.", background=True),
                usage=USAGE,
            ),
            reply(text("The reader reported."), usage=USAGE),
            # Started by the background child's notification (the parent was idle): continue the reader.
            reply(tool_use("t_send", "SendMessage", to=fg_id, message="Touch approved.txt."), usage=USAGE),
            reply(text("All done."), usage=USAGE),
        ],
    )
    fake.script(
        fg,
        [
            reply(tool_use("fg_read", "Read", file_path="README.md"), usage=USAGE),
            reply(text("README says: # acl"), usage=USAGE),
            reply(tool_use("fg_touch", "Bash", command="touch approved.txt"), usage=USAGE),
            reply(text("Touched."), usage=USAGE),
        ],
    )
    fake.script(bg, [reply(text("hi"), usage=USAGE)])
    producer = cluster.producer()
    try:
        await producer.send_prompt(parent, "Read the README, say hi in the background.")

        # H8.1: the continued child's Bash asks; a person allows it with the CLI, as the producer.
        async def asked() -> bool:
            return bool(await producer.pending_approvals(fg))

        await eventually(asked, timeout_s=180)
        (approval,) = await producer.pending_approvals(fg)
        assert approval.request.agent_id == fg_id
        producer_cli(cluster, "approvals", "allow", approval.request.approval_id)

        history = await wait_for(producer, parent, mentioning("All done."), timeout_s=180)
        history = await wait_for(producer, parent, turn_ended, timeout_s=120)
        assert_every_tool_use_answered_once(history)
        requests = [entry["body"] for entry in fake.requests(parent)]
        assert len(requests) == 4
        # A5: the foreground child's result (after its Read) answers the parent's call.
        assert tool_results(requests[1])["t_fg"]["content"][0] == {"type": "text", "text": "README says: # acl"}
        # A5.4: the background child's notification started the parent's third request.
        assert f"<task-id>{bg_id}</task-id>" in said(requests[2])
        assert "<status>completed</status>" in said(requests[2])
        # A4.4 + H8.1: the continued child ran the approved call and answered SendMessage.
        assert tool_results(requests[3])["t_send"]["content"][0] == {"type": "text", "text": "Touched."}
        assert (cluster.workspace / "approved.txt").exists()
        # A5.3: the tool worker followed the background child's log into its output file.
        output = Path(output_file_path(str(cluster.workspace.resolve()), bg_id))

        async def written() -> bool:
            return output.exists() and b'"hi"' in output.read_bytes()

        await eventually(written, timeout_s=60)

        # A4: the tree, its usage and its logs, read by the producer through the CLI.
        tree = await producer.session_tree(parent)
        assert sorted((node.agent_id, node.status) for node in tree.children) == sorted(
            [(fg_id, "completed"), (bg_id, "completed")]
        )
        usage = json.loads(producer_cli(cluster, "usage", parent, "--tree", "--json"))
        assert sorted(usage["sessions"]) == sorted([parent, fg, bg])
        assert usage["total"]["requests"] == 4 + 4 + 1
        outline = producer_cli(cluster, "tail", parent, "--tree")
        assert f"agent {fg_id}" in outline
        assert f"agent {bg_id}" in outline
    finally:
        await producer.close()
    await assert_no_noperm_and_no_dead_letters(cluster)


async def test_a8_3_the_producer_stops_a_background_child_with_agents_stop(
    acl_deployment: AclCluster, fake: FakeModelProcess
) -> None:
    cluster = acl_deployment
    parent = "acl-stop"
    agent_id = agent_id_for(parent, "t_watch")
    child = child_session_id(parent, agent_id)
    fake.script(
        parent,
        [
            reply(agent("t_watch", "watch", "Watch.", background=True), usage=USAGE),
            reply(text("Watching."), usage=USAGE),
            reply(text("Noted: the watcher was stopped."), usage=USAGE),
        ],
    )
    fake.script(child, [reply(text("Halfway."), tool_use("c_nap", "Bash", command="sleep 60"), usage=USAGE)])
    producer = cluster.producer()
    try:
        await producer.send_prompt(parent, "Watch in the background.")
        await wait_for(producer, child, mentioning("c_nap"), timeout_s=180)
        stopped = producer_cli(cluster, "agents", "stop", agent_id)
        assert child in stopped
        # A8.4: the stopped child's running command is killed (the stop is an esc, bus/interrupts.py), not left
        # to run its minute: its call is answered with the rejection.
        await wait_for(producer, child, mentioning(USER_REJECTED_TOOL_USE), timeout_s=30)
        history = await wait_for(
            producer,
            parent,
            mentioning("Noted: the watcher"),
            timeout_s=180,
        )
        assert_every_tool_use_answered_once(history)
        assert "<status>killed</status>" in said(fake.requests(parent)[-1]["body"])
        assert (await producer.session_tree(parent)).children[0].status == "killed"
    finally:
        await producer.close()
    await assert_no_noperm_and_no_dead_letters(cluster)


# -- key by key --------------------------------------------------------------------------------------

TOPOLOGY = Topology(StreamNames())


@pytest.fixture
def acl_redis(tmp_path: Path) -> Iterator[AclRedis]:
    server = start_acl_redis(tmp_path / "redis")
    try:
        yield server
    finally:
        server.stop()


async def test_each_worker_user_does_its_part_of_the_subagent_store_and_nothing_more(acl_redis: AclRedis) -> None:
    users = {
        name: aioredis.Redis.from_url(acl_redis.url(name))
        for name in ("tools", "ingestion", "transcripts", "producer", "operator")
    }
    key = b"0" * 32
    try:
        parent = "keys-parent"
        record = child_record(parent, "t_1", deadline_ms=1)  # already overdue: the sweep ends it
        child = record.session_id
        await users["operator"].set(TOPOLOGY.session_config(parent), SessionModelConfig().to_wire_json())

        # tools: the launch (A1) — fan-out count, the child's config, record, links, index, agentId.
        tools = AgentStore(users["tools"], TOPOLOGY)
        assert await tools.reserve(record, 4) == 1
        await users["tools"].set(TOPOLOGY.session_config(child), SessionModelConfig().to_wire_json())
        assert await tools.register(record)
        assert await tools.find(record.agent_id) == child
        assert await tools.cancelled_at(parent) is None
        await users["tools"].xrange(TOPOLOGY.session_events(child))  # a child's log (task output, A5.3)
        await users["tools"].xread({TOPOLOGY.session_events(child): "0"}, count=1)
        await users["tools"].hgetall(TOPOLOGY.tool_catalog)  # the parent's default tool pool (A3.4)
        # ... and not a top-level session's config, nor its conversation.
        with pytest.raises(NoPermissionError):
            await users["tools"].set(TOPOLOGY.session_config(parent), "{}")
        with pytest.raises(NoPermissionError):
            await users["tools"].xrange(TOPOLOGY.session_events(parent))
        with pytest.raises(NoPermissionError):
            await users["tools"].set(TOPOLOGY.names.session_key(parent, "agent"), "{}")

        # transcripts: reads the record (the meta sidecar, A4.1), writes none of it.
        assert await AgentStore(users["transcripts"], TOPOLOGY).record(child) is not None
        with pytest.raises(NoPermissionError):
            await AgentStore(users["transcripts"], TOPOLOGY).end(record, "completed", 1)

        # producer: the tree, usage --tree, and agents stop's lookup (A4, A8.3); never a record write.
        tree = await session_tree(users["producer"], TOPOLOGY, parent)
        assert [node.session_id for node in tree.children] == [child]
        assert (await resolve_running_child(users["producer"], TOPOLOGY, record.agent_id)).session_id == child
        with pytest.raises(NoPermissionError):
            await AgentStore(users["producer"], TOPOLOGY).register(record)
        with pytest.raises(NoPermissionError):
            await AgentStore(users["producer"], TOPOLOGY).end(record, "completed", 1)
        with pytest.raises(NoPermissionError):
            await users["producer"].set(TOPOLOGY.names.stream(f"agents:by-id:{record.agent_id}"), "x")
        # ``tail``/``usage`` ask whether the bus ever saw a session (ZSCORE of the shard's index): a producer
        # may ask about one session it names, not list the sessions of others (an ACL selector).
        index = TOPOLOGY.sessions(TOPOLOGY.names.shard_of(parent))
        assert await users["producer"].zscore(index, parent) is None
        with pytest.raises(NoPermissionError):
            await users["producer"].zrange(index, 0, -1)

        # ingestion: the cancel marker inside the batch script (A8.2), the relay's cursor, the sweep (A9
        # wall time: the child is overdue), the cascade of a parent's cancel.
        calls = KeyCalls()
        calls.add("SET", AgentStore(users["ingestion"], TOPOLOGY).keys.cancel(parent), 1, "PX", CANCEL_MARKER_TTL_MS)
        await calls.write(users["ingestion"])
        relay = ChildRelay(users["ingestion"], TOPOLOGY, internal_key=key)
        await relay.store.set_relayed_seq(child, 0)
        assert await relay.store.relayed_seq(child) == 0
        assert await relay.sweep(TOPOLOGY.names.shard_of(child), full=True) == 1
        assert (await relay.store.record(child) or (None, ""))[1] == "failed"
        assert await relay.cancel_children(parent, interrupted_at_ms=0) == 0
        assert await users["operator"].scard(tools.keys.running_children(parent)) == 0
        assert await users["operator"].zcard(tools.keys.running_index_for(child)) == 0

        # tools again: SendMessage restarts the ended child (A4.4); a refused fan-out releases its slot.
        again = record.model_copy(update={"parent_tool_use_id": "t_2", "deadline_ms": 2**40})
        assert await tools.reserve(again, 4) == 1
        await tools.restart(again)
        await tools.release(parent, child)
        assert (await tools.record(child) or (None, ""))[1] == "running"
        # A8.2: a launch that finds its parent interrupted stops the child and answers the call itself.
        launcher_relay = ChildRelay(users["tools"], TOPOLOGY, internal_key=key)
        await launcher_relay.stop_child(again)
        assert await launcher_relay.answer_parent(again, interrupted_result(), "interrupted")

        # ingestion: a background child's end is a task notification to its parent (A5.4).
        background = child_record(parent, "t_3", deadline_ms=2**40).model_copy(
            update={"background": True, "output_file": "/agentbus/.agentbus/tasks/x.output"}
        )
        assert await tools.reserve(background, 4) == 1
        assert await tools.register(background)
        assert await relay.answer_parent(background, interrupted_result(), "interrupted")
        assert (await relay.store.record(background.session_id) or (None, ""))[1] == "killed"
    finally:
        for client in users.values():
            await client.aclose()


def test_no_worker_nor_producer_user_is_granted_every_key_command_or_channel() -> None:
    """Least privilege (deploy/redis/users.acl): only ``operator`` holds every ``agentbus:`` key and (but the
    @dangerous ones) every command; no user holds every key or every channel, and every key pattern stays under
    the ``agentbus:`` prefix."""
    broad = {"~*", "%R~*", "%W~*", "%RW~*", "allkeys", "+@all", "allcommands", "&*", "allchannels"}
    for line in ACL_FILE.read_text(encoding="utf-8").splitlines():
        _, user, *rules = line.replace("(", " ").replace(")", " ").split()
        granted = broad & set(rules)
        # The operator (CLI, `streams init`) runs every command but the @dangerous ones, on agentbus keys.
        assert granted <= ({"+@all"} if user == "operator" else set()), (user, granted)
        patterns = [rule.split("~", 1)[1] for rule in rules if rule.startswith(("~", "%"))]
        assert all(pattern.startswith("agentbus:") for pattern in patterns), (user, patterns)
        # keda reads lag (XINFO, XLEN, XPENDING) of any stream, the console any session's state: both read-only.
        if user in {"keda", "console"}:
            assert [rule for rule in rules if rule.endswith("~agentbus:*")] == ["%R~agentbus:*"], user
        elif user != "operator":
            assert "agentbus:*" not in patterns, user
