"""Issue 19, sub-agents (agent-loop.md §A) through real worker processes and a real Redis; the model
side of the parent and of every child is played through the SDK (``send_assistant``).

- A7: three Agent calls in one reply start three child sessions that finish in any order and pair the
  parent's calls; A5 exact result shape; A6 agent_progress in the parent's log; A4 sidechain transcripts
  with the meta sidecar, all four transcripts valid.
- A8: interrupting the parent cancels its children: the running child's tool gets REJECT_MESSAGE and the
  interrupt text, the parent's Agent calls get REJECT_MESSAGE.
- A9: a child past its wall time answers its parent with an error and is stopped; a child cannot nest.
- A1.3: an unknown agent type is an error result with the exact text.
"""

from __future__ import annotations

import asyncio
import json
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from agentbus_redis.agents.ids import agent_id_for, child_session_id
from agentbus_redis.api.validation import validate_api_request
from agentbus_redis.json_types import JsonObject
from agentbus_redis.messages.constants import (
    INTERRUPT_MESSAGE_FOR_TOOL_USE,
    REJECT_MESSAGE,
    SUBAGENT_REJECT_MESSAGE,
    dont_ask_reject_message,
)
from agentbus_redis.messages.content import ToolUseBlock
from agentbus_redis.messages.factories import create_assistant_message
from agentbus_redis.messages.kinds import ProgressMessage
from agentbus_redis.model.cost import DEFAULT_PRICES
from agentbus_redis.model.session_config import SessionModelConfig
from agentbus_redis.sdk.client import AgentbusClient, PublishedRequest
from agentbus_redis.session_ids import claude_session_id
from agentbus_redis.stores.usage import record_priced_usage
from agentbus_redis.transcript import read_transcript, verify_transcript
from agentbus_redis.transcript_files.layout import session_file
from tests.cli.process import agentbus, cli_env
from tests.integration.cluster import WorkerCluster, eventually

pytestmark = [pytest.mark.integration, pytest.mark.slow]


def agent_call(tool_id: str, description: str, prompt: str, subagent_type: str | None = None) -> ToolUseBlock:
    tool_input: dict[str, Any] = {"description": description, "prompt": prompt}
    if subagent_type is not None:
        tool_input["subagent_type"] = subagent_type
    return ToolUseBlock(id=tool_id, name="Agent", input=tool_input)


def agent_input(call: ToolUseBlock) -> dict[str, Any]:
    assert isinstance(call.input, dict)
    return call.input


def child_of(parent: str, tool_use_id: str) -> str:
    return child_session_id(parent, agent_id_for(parent, tool_use_id))


def results_of(request: PublishedRequest) -> dict[str, dict[str, Any]]:
    last = request.request["messages"][-1]
    return {b["tool_use_id"]: b for b in last["content"] if isinstance(b, dict) and b.get("type") == "tool_result"}


def text_of(result: dict[str, Any]) -> str:
    content = result["content"]
    return content if isinstance(content, str) else "\n".join(part.get("text", "") for part in content)


WALL_TIME_S = 12
MAX_TOKENS = 10_000
"""Tokens one child may use (the SDK-played replies of the other tests report none)."""
"""Every child of this module's workers is stopped after this (long enough for the children that finish)."""


@pytest.fixture(scope="module")
def cluster(module_cluster: WorkerCluster) -> WorkerCluster:
    """One deployment for the module (each test uses its own sessions)."""
    definitions = module_cluster.root / "agents.json"
    definitions.write_text(
        json.dumps(
            {
                "reviewer": {"description": "Reviews files", "prompt": "You review files.", "tools": ["Read"]},
                "cautious": {"description": "Never asks", "prompt": "Be careful.", "permissionMode": "dontAsk"},
            }
        )
    )
    module_cluster.extra_env.update(
        {
            "AGENTBUS_AGENTS__DEFINITIONS_FILE": str(definitions),
            "AGENTBUS_AGENTS__WALL_TIME_S": str(WALL_TIME_S),
            "AGENTBUS_AGENTS__MAX_TOKENS": str(MAX_TOKENS),
        }
    )
    module_cluster.workspace.mkdir(parents=True, exist_ok=True)
    (module_cluster.workspace / "a.txt").write_text("alpha\n")
    for name in ("ingestion", "normalization", "transcripts", "tools"):
        module_cluster.start(name)
    module_cluster.wait_ready(timeout_s=240)  # this machine is shared: starting can be slow under load
    return module_cluster


def tool_results_in(entries: list[Any]) -> list[dict[str, Any]]:
    """Every tool_result block of the user messages of ``entries`` (log entries), in log order."""
    found: list[dict[str, Any]] = []
    for entry in entries:
        wire: Any = entry.message.to_wire()
        if entry.message.type == "user" and isinstance(wire["message"]["content"], list):
            found += [b for b in wire["message"]["content"] if b.get("type") == "tool_result"]
    return found


async def config_of(bus: AgentbusClient, session: str) -> SessionModelConfig:
    raw = await bus.redis.get(bus.topology.session_config(session))
    assert raw is not None
    return SessionModelConfig.model_validate_json(raw)


def transcript_dir(cluster: WorkerCluster, parent: str) -> Path:
    return session_file(cluster.data_dir, cluster.cwd, parent).with_suffix("") / "subagents"


async def verified(path: Path) -> bool:
    if not path.exists():
        return False
    return verify_transcript(read_transcript(path.read_bytes())).ok


async def test_a7_three_parallel_children_finish_in_any_order_and_pair_the_parents_calls(
    cluster: WorkerCluster,
) -> None:
    parent = "agents-parallel"
    async with cluster.client() as bus:
        await bus.send_prompt_and_wait(parent, "review a.txt three ways")
        calls = [
            agent_call("toolu_A", "read a", "Read a.txt and report its first word.", "reviewer"),
            agent_call("toolu_B", "say hi", "Say hi."),
            agent_call("toolu_C", "say bye", "Say bye."),
        ]
        await bus.send_assistant(parent, create_assistant_message(calls))
        children = {call.id: child_of(parent, call.id) for call in calls}

        # Each child is its own session with its own first request: the prompt, nothing of the parent (A3.2).
        firsts = {tool_id: await bus.next_request(child, after_seq=0) for tool_id, child in children.items()}
        for tool_id, request in firsts.items():
            prompt = next(agent_input(call)["prompt"] for call in calls if call.id == tool_id)
            assert request.request["messages"] == [{"role": "user", "content": prompt}]
        config = await config_of(bus, children["toolu_A"])
        assert (config.agent_type, config.parent_session_id, config.depth, config.tools) == (
            "reviewer",
            parent,
            1,
            ["Read"],
        )
        assert config.thinking == {"type": "disabled"}
        assert (config.system_prompt or "").startswith("You review files.")

        # C ends first, then A after a tool call of its own, then B (A7: any order).
        await bus.send_assistant(children["toolu_C"], create_assistant_message("Bye."))
        await bus.send_assistant(
            children["toolu_A"],
            create_assistant_message([ToolUseBlock(id="toolu_A_read", name="Read", input={"file_path": "a.txt"})]),
        )
        after_tool = await bus.next_request(children["toolu_A"], after_seq=firsts["toolu_A"].seq)
        assert "alpha" in json.dumps(after_tool.request["messages"][-1])
        await bus.send_assistant(children["toolu_A"], create_assistant_message("The first word is alpha."))
        before = await bus.latest_request(parent)
        await bus.send_assistant(children["toolu_B"], create_assistant_message("Hi."))

        request = await bus.next_request(parent, after_seq=before.seq if before else 0)
        assert validate_api_request(request.request) == []  # type: ignore[arg-type]
        results = results_of(request)
        assert sorted(results) == ["toolu_A", "toolu_B", "toolu_C"]
        agent_a = agent_id_for(parent, "toolu_A")
        content_a = results["toolu_A"]["content"]
        assert "is_error" not in results["toolu_A"]
        assert content_a[0] == {"type": "text", "text": "The first word is alpha."}
        trailer = content_a[1]["text"]
        assert trailer.startswith(
            f"agentId: {agent_a} (use SendMessage with to: '{agent_a}' to continue this agent)\n<usage>"
        )
        assert "\ntool_uses: 1\n" in trailer
        assert text_of(results["toolu_B"]).startswith("Hi.")
        assert text_of(results["toolu_C"]).startswith("Bye.")

        # A6: the parent saw agent_progress for A's prompt, its tool_use and its tool_result.
        history = await bus.history(parent)
        progress = [e.message for e in history if isinstance(e.message, ProgressMessage)]
        of_a = [p for p in progress if p.parent_tool_use_id == "toolu_A"]
        assert [p.data["prompt"] for p in of_a][:1] == ["Read a.txt and report its first word."]
        assert {p.data["type"] for p in of_a} == {"agent_progress"}
        assert len(of_a) == 3, [p.data["message"] for p in of_a]
        assert all(p.tool_use_id and p.tool_use_id.startswith("agent_") for p in of_a)
        # toolUseResult (A5.1) is stored on the parent's result line.
        stored: Any = next(
            e.message.to_wire()["toolUseResult"]
            for e in history
            if "toolUseResult" in e.message.to_wire() and "toolu_A" in json.dumps(e.message.to_wire())
        )
        assert (stored["agentId"], stored["agentType"], stored["totalToolUseCount"]) == (agent_a, "reviewer", 1)

        # A4: three sidechain files under the parent's directory, a meta sidecar each, all valid.
        await bus.send_assistant(parent, create_assistant_message("All three agents reported."))
        files = {
            tool_id: transcript_dir(cluster, parent) / f"agent-{agent_id_for(parent, tool_id)}.jsonl"
            for tool_id in children
        }
        for path in [session_file(cluster.data_dir, cluster.cwd, parent), *files.values()]:
            await eventually(lambda path=path: verified(path), timeout_s=20)
        lines = [json.loads(line) for line in files["toolu_A"].read_text().splitlines()]
        assert all(line["isSidechain"] is True and line["agentId"] == agent_a for line in lines)
        assert all(line["sessionId"] == claude_session_id(parent) for line in lines)  # the root file's name
        assert lines[0]["parentUuid"] is None
        assert [line["type"] for line in lines] == ["user", "assistant", "user", "assistant"]
        meta = json.loads(files["toolu_A"].with_name(f"agent-{agent_a}.meta.json").read_text())
        assert meta == {"agentType": "reviewer", "description": "read a"}
        assert not session_file(cluster.data_dir, cluster.cwd, children["toolu_A"]).exists()

        # The tree: the SDK, `usage --tree` (usage rolled up from the children) and `tail --tree`.
        tree = await bus.session_tree(parent)
        assert [(c.agent_id, c.status, c.parent_tool_use_id) for c in tree.children] == sorted(
            (agent_id_for(parent, tool_id), "completed", tool_id) for tool_id in children
        )
        usage: JsonObject = {"input_tokens": 1000, "output_tokens": 100}
        for session in [parent, *children.values()]:
            await record_priced_usage(
                bus.redis, bus.topology, session, model="claude-haiku-4-5", usage=usage, prices=DEFAULT_PRICES
            )
        rolled = await bus.tree_usage(parent)
        assert (rolled.total.requests, rolled.total.input_tokens, rolled.total.output_tokens) == (4, 4000, 400)
        env = cli_env(cluster.redis_url, AGENTBUS_SHARDS=str(cluster.names.shards))
        shown = agentbus("usage", parent, "--tree", cwd=cluster.root, env=env)
        assert shown.code == 0, shown.stderr
        assert shown.stdout.splitlines()[0] == f"session {parent} (+3 sub-sessions)"
        assert f'  {children["toolu_A"]}  agent {agent_a} (reviewer: "read a") completed' in shown.stdout
        tailed = agentbus("tail", parent, "--tree", cwd=cluster.root, env=env)
        assert tailed.code == 0, tailed.stderr
        headings = [line for line in tailed.stdout.splitlines() if line.startswith("== ")]
        assert [heading.split()[1] for heading in headings] == [parent, *sorted(children.values())]


async def wait_for_text(bus: AgentbusClient, session: str, text: str) -> None:
    async def seen() -> bool:
        return any(text in json.dumps(e.message.to_wire()) for e in await bus.history(session))

    await eventually(seen, timeout_s=20)


async def test_a8_interrupting_the_parent_cancels_its_children(cluster: WorkerCluster) -> None:
    parent = "agents-interrupt"
    async with cluster.client() as bus:
        await bus.send_prompt_and_wait(parent, "start two agents")
        calls = [agent_call("toolu_busy", "busy", "Sleep."), agent_call("toolu_idle", "idle", "Wait.")]
        await bus.send_assistant(parent, create_assistant_message(calls))
        busy, idle = child_of(parent, "toolu_busy"), child_of(parent, "toolu_idle")
        await bus.next_request(busy, after_seq=0)
        await bus.next_request(idle, after_seq=0)
        await bus.send_assistant(
            busy, create_assistant_message([ToolUseBlock(id="toolu_sleep", name="Bash", input={"command": "sleep 15"})])
        )
        await wait_for_text(bus, parent, "toolu_sleep")  # the busy child's tool_use reached the parent as progress
        await bus.interrupt(parent)

        # The parent's calls get REJECT_MESSAGE, then the interrupt text ends its turn (A8.2, R10.2).
        await wait_for_text(bus, parent, INTERRUPT_MESSAGE_FOR_TOOL_USE)
        answers = tool_results_in(await bus.history(parent))
        assert {a["tool_use_id"]: (a["content"], a["is_error"]) for a in answers} == {
            "toolu_busy": (REJECT_MESSAGE, True),
            "toolu_idle": (REJECT_MESSAGE, True),
        }
        # The busy child's own tool was stopped and its turn closed with the interrupt text (A8.1).
        await wait_for_text(bus, busy, INTERRUPT_MESSAGE_FOR_TOOL_USE)
        busy_results = tool_results_in(await bus.history(busy))
        assert [(b["tool_use_id"], b["is_error"]) for b in busy_results] == [("toolu_sleep", True)]

        async def interrupted() -> bool:
            return await bus.redis.hget(cluster.names.session_key(busy, "agent"), "status") == b"interrupted"

        await eventually(interrupted, timeout_s=10)


async def test_a8_1_an_interrupted_child_ends_its_parents_call_even_between_model_calls(
    cluster: WorkerCluster,
) -> None:
    parent = "agents-child-interrupt"
    async with cluster.client() as bus:
        before = await bus.send_prompt_and_wait(parent, "start an agent")
        await bus.send_assistant(parent, create_assistant_message([agent_call("toolu_i", "idle", "Wait.")]))
        child = child_of(parent, "toolu_i")
        await bus.next_request(child, after_seq=0)  # waiting for the model: no reply, no tool running
        await bus.interrupt(child)
        (result,) = results_of(await bus.next_request(parent, after_seq=before.seq)).values()
        assert (result["content"], result["is_error"]) == (REJECT_MESSAGE, True)


async def test_a9_a_child_over_its_token_limit_is_stopped_and_answers_with_an_error(cluster: WorkerCluster) -> None:
    parent = "agents-tokens"
    async with cluster.client() as bus:
        before = await bus.send_prompt_and_wait(parent, "start a costly agent")
        await bus.send_assistant(parent, create_assistant_message([agent_call("toolu_t", "costly", "Think hard.")]))
        child = child_of(parent, "toolu_t")
        await bus.next_request(child, after_seq=0)
        look = ToolUseBlock(id="toolu_t_read", name="Read", input={"file_path": "a.txt"})
        costly = create_assistant_message([look])
        usage = {"input_tokens": 9_000, "output_tokens": 1_500}
        await bus.send_assistant(
            child, costly.model_copy(update={"message": costly.message.model_copy(update={"usage": usage})})
        )
        (result,) = results_of(await bus.next_request(parent, after_seq=before.seq)).values()
        agent = agent_id_for(parent, "toolu_t")
        assert result["is_error"] is True
        assert result["content"] == (
            f'<tool_use_error>Agent "costly" (agentId: {agent}) exceeded its token limit of {MAX_TOKENS} tokens '
            "(used 10500) and was stopped</tool_use_error>"
        )

        # The child was stopped (an interrupt into its ingress: its model call and tools stop, A8.1).
        async def failed() -> bool:  # marked after the parent's result is published (relay.py)
            return await bus.redis.hget(cluster.names.session_key(child, "agent"), "status") == b"failed"

        await eventually(failed, timeout_s=10)
        rows: Any = await bus.redis.xrange(bus.topology.ingress_for(child))
        stops = [row for row in rows if b"agent_stop:" in row[1][b"data"]]
        assert len(stops) == 1


async def test_a9_a_child_past_its_wall_time_answers_its_parent_with_an_error(cluster: WorkerCluster) -> None:
    parent = "agents-wall-time"
    async with cluster.client() as bus:
        before = await bus.send_prompt_and_wait(parent, "start a slow agent")
        await bus.send_assistant(parent, create_assistant_message([agent_call("toolu_slow", "slow", "Take forever.")]))
        request = await bus.next_request(parent, after_seq=before.seq, timeout_s=30)
        (result,) = results_of(request).values()
        agent = agent_id_for(parent, "toolu_slow")
        assert result["is_error"] is True
        assert result["content"] == (
            f'<tool_use_error>Agent "slow" (agentId: {agent}) exceeded its wall-time limit of {WALL_TIME_S}s '
            "and was stopped</tool_use_error>"
        )


async def test_a1_3_unknown_type_and_a9_no_nesting_are_error_results(cluster: WorkerCluster) -> None:
    parent = "agents-errors"
    async with cluster.client() as bus:
        before = await bus.send_prompt_and_wait(parent, "start agents")
        await bus.send_assistant(
            parent,
            create_assistant_message(
                [agent_call("toolu_bad", "bad", "x", "nope"), agent_call("toolu_ok", "nest", "Start an agent.")]
            ),
        )
        child = child_of(parent, "toolu_ok")
        first = await bus.next_request(child, after_seq=0)
        # A child may not start agents (A9: no nesting): the Agent tool is not offered, and a call anyway fails.
        config = await config_of(bus, child)
        assert config.tools is not None
        assert "Agent" not in config.tools
        await bus.send_assistant(child, create_assistant_message([agent_call("toolu_nested", "nested", "x")]))
        nested = results_of(await bus.next_request(child, after_seq=first.seq))
        assert nested["toolu_nested"]["is_error"] is True
        assert "Sub-agents cannot start further agents" in text_of(nested["toolu_nested"])
        await bus.send_assistant(child, create_assistant_message("Could not nest."))
        request = await bus.next_request(parent, after_seq=before.seq)
        results = results_of(request)
        assert results["toolu_bad"]["content"] == (
            "<tool_use_error>Agent type 'nope' not found. Available agents: general-purpose, reviewer, cautious"
            "</tool_use_error>"
        )
        assert text_of(results["toolu_ok"]).startswith("Could not nest.")


async def test_a3_7_a_child_decides_its_tools_in_its_own_mode_with_the_sub_agent_texts(cluster: WorkerCluster) -> None:
    parent = "agents-modes"
    async with cluster.client() as bus:
        await bus.send_prompt_and_wait(parent, "start agents")
        calls = [
            agent_call("toolu_gp", "plain", "Remove x."),
            agent_call("toolu_dont", "careful", "Remove x.", "cautious"),
        ]
        await bus.send_assistant(parent, create_assistant_message(calls))
        texts = {}
        for tool_id in ("toolu_gp", "toolu_dont"):
            child = child_of(parent, tool_id)
            first = await bus.next_request(child, after_seq=0)
            rm = ToolUseBlock(id=f"{tool_id}_rm", name="Bash", input={"command": "rm -rf x"})
            await bus.send_assistant(child, create_assistant_message([rm]))
            texts[tool_id] = text_of(results_of(await bus.next_request(child, after_seq=first.seq))[rm.id])
        # H8/R8.1: a sub-agent's rejection is SUBAGENT_REJECT_MESSAGE; A3.7: "cautious" runs in dontAsk.
        assert texts == {"toolu_gp": SUBAGENT_REJECT_MESSAGE, "toolu_dont": dont_ask_reject_message("Bash")}


async def restart(cluster: WorkerCluster, name: str) -> None:
    """Start a new ``name`` worker and wait until it is ready (the killed one stays in the list, dead)."""
    (worker,) = cluster.start(name)

    async def ready() -> bool:
        if worker.process.poll() is not None:
            raise RuntimeError(f"{name} exited: {worker.log_path.read_text()[-2000:]}")
        try:
            await asyncio.to_thread(urllib.request.urlopen, f"http://127.0.0.1:{worker.port}/readyz", timeout=1)
        except (urllib.error.URLError, OSError):
            return False
        return True

    await eventually(ready, timeout_s=240, interval_s=0.1)


async def test_sigkill_of_the_tool_and_ingestion_workers_loses_no_child_and_answers_each_call_once(
    cluster: WorkerCluster,
) -> None:
    """Issue 19 "SIGKILL of any worker loses nothing and duplicates nothing": a launch re-run after the tool
    worker died starts the same children (one prompt each); a child's end committed or not when ingestion
    died is answered once (the relay or, after a crash between commit and relay, the sweep)."""
    parent = "agents-sigkill"
    async with cluster.client() as bus:
        before = await bus.send_prompt_and_wait(parent, "start two agents")
        calls = [agent_call("toolu_k1", "one", "Say one."), agent_call("toolu_k2", "two", "Say two.")]
        await bus.send_assistant(parent, create_assistant_message(calls))
        (tools,) = cluster.of("tools")
        cluster.kill(tools)  # during or before the launch
        await restart(cluster, "tools")
        one, two = child_of(parent, "toolu_k1"), child_of(parent, "toolu_k2")
        await bus.next_request(one, after_seq=0, timeout_s=60)
        await bus.next_request(two, after_seq=0, timeout_s=60)
        await bus.send_assistant(one, create_assistant_message("One."))
        (ingestion,) = cluster.of("ingestion")
        cluster.kill(ingestion)  # the child's end is committed, or not yet, or not yet relayed
        await bus.send_assistant(two, create_assistant_message("Two."))
        await restart(cluster, "ingestion")

        request = await bus.next_request(parent, after_seq=before.seq, timeout_s=90)
        assert validate_api_request(request.request) == []  # type: ignore[arg-type]
        results = results_of(request)
        assert text_of(results["toolu_k1"]).startswith("One.")
        assert text_of(results["toolu_k2"]).startswith("Two.")
        answers = [a["tool_use_id"] for a in tool_results_in(await bus.history(parent))]
        assert sorted(answers) == ["toolu_k1", "toolu_k2"]  # each call answered exactly once
        for child in (one, two):
            prompts = [e for e in await bus.history(child) if e.message.type == "user"]
            assert len(prompts) == 1  # one first prompt, however often the launch ran


async def test_a_child_inherits_its_parents_sandbox_network(cluster: WorkerCluster) -> None:
    """Issue 28: a session's own network allow-list narrows the deployment's; its sub-agents get the same list
    (a child never reaches more than its parent: without it the child would have the deployment's)."""
    parent = "agents-network"
    narrowed = {"allowed_domains": ["pypi.org"], "denied_domains": ["evil.example.com"]}
    async with cluster.client() as bus:
        await bus.redis.set(
            bus.topology.session_config(parent), SessionModelConfig(sandbox_network=narrowed).to_wire_json()
        )
        await bus.send_prompt_and_wait(parent, "start an agent")
        await bus.send_assistant(parent, create_assistant_message([agent_call("toolu_net", "net", "Say hi.")]))
        child = child_of(parent, "toolu_net")
        await bus.next_request(child, after_seq=0)
        config = await config_of(bus, child)
        assert config.sandbox_network == narrowed
        await bus.send_assistant(child, create_assistant_message("hi"))
