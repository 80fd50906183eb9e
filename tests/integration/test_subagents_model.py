"""Issue 19 "Done when", sub-agents end to end: real worker processes (the model worker included), a real
Redis and the fake Anthropic-compatible server over real HTTP, scripted per session (children by their
derived session ids). A parent starts three children in parallel; one reads a file, one asks for
approval (a person allows it), one is interrupted while its reply streams. All four transcripts are
valid, the parent's last request pairs every Agent call, and the children's usage rolls up into the tree.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from agentbus_redis.agents.ids import agent_id_for, child_session_id
from agentbus_redis.messages.constants import REJECT_MESSAGE
from agentbus_redis.messages.kinds import AttachmentMessage
from agentbus_redis.sdk.conversation import TaskNotification, TaskProgress, TaskStarted, TurnEnd
from agentbus_redis.transcript import read_transcript, verify_transcript
from agentbus_redis.transcript_files.layout import session_file
from tests.integration.cluster import WorkerCluster, eventually
from tests.integration.fake_model import FakeModelProcess
from tests.integration.model_turns import (
    assert_every_tool_use_answered_once,
    reply,
    text,
    tool_use,
    turn_ended,
    wait_for,
)

pytestmark = [pytest.mark.integration, pytest.mark.slow]

USAGE = {"input_tokens": 100, "output_tokens": 20}


@pytest.fixture(scope="module")
def deployment(module_cluster: WorkerCluster, fake: FakeModelProcess) -> WorkerCluster:
    definitions = module_cluster.root / "agents.json"
    definitions.write_text(
        json.dumps(
            {
                "reviewer": {"description": "Reviews files", "prompt": "You review files.", "tools": ["Read"]},
                "brief": {"description": "One turn", "prompt": "Be brief.", "maxTurns": 1},
            }
        )
    )
    module_cluster.extra_env.update(
        {
            "ANTHROPIC_API_KEY": "sk-ant-test",
            "AGENTBUS_MODEL__BASE_URL": fake.base_url,
            "AGENTBUS_MODEL__MODEL": "claude-sonnet-4-6",
            "AGENTBUS_AGENTS__DEFINITIONS_FILE": str(definitions),
            "AGENTBUS_TOOLS__ASK_POLICY": "approve",
        }
    )
    for name in ("ingestion", "normalization", "transcripts", "tools", "model"):
        module_cluster.start(name)
    module_cluster.wait_ready(timeout_s=240)
    module_cluster.workspace.mkdir(parents=True, exist_ok=True)
    (module_cluster.workspace / "README.md").write_text("# demo\n", encoding="utf-8")
    return module_cluster


def agent(tool_id: str, description: str, prompt: str, subagent_type: str | None = None) -> dict[str, Any]:
    arguments = {"description": description, "prompt": prompt}
    if subagent_type is not None:
        arguments["subagent_type"] = subagent_type
    return tool_use(tool_id, "Agent", **arguments)


async def test_issue_19_three_children_one_approved_one_interrupted_end_with_valid_transcripts_and_usage_rolled_up(
    deployment: WorkerCluster, fake: FakeModelProcess
) -> None:
    parent = "agents-e2e"
    child = {tool_id: child_session_id(parent, agent_id_for(parent, tool_id)) for tool_id in ("t_a", "t_b", "t_c")}
    fake.script(
        parent,
        [
            reply(
                text("Starting three agents."),
                agent("t_a", "read readme", "Read README.md and quote it.", "reviewer"),
                agent("t_b", "say two", "Answer: two."),
                agent("t_c", "long story", "Tell a long story."),
                usage=USAGE,
            ),
            reply(text("Two agents reported; one was stopped."), usage=USAGE),
        ],
    )
    fake.script(
        child["t_a"],
        [
            reply(tool_use("t_a_read", "Read", file_path="README.md"), usage=USAGE),
            reply(text("README says: # demo"), usage=USAGE),
        ],
    )
    # B asks for approval (H8.1: the request names the sub-agent), a person allows it.
    fake.script(
        child["t_b"],
        [reply(tool_use("t_b_touch", "Bash", command="touch b.txt"), usage=USAGE), reply(text("two"), usage=USAGE)],
    )
    # C streams a first block, then a second one slowly: it is interrupted while its reply streams.
    fake.script(
        child["t_c"],
        [reply(text("Once upon a time."), text("And then " * 40), chunk_delay_ms=500, usage=USAGE)],
    )
    async with deployment.client() as bus:
        await bus.send_prompt(parent, "Run three agents.")
        await wait_for(
            bus, child["t_c"], lambda h: any("Once upon a time." in json.dumps(e.message.to_wire()) for e in h)
        )
        await bus.interrupt(child["t_c"])

        async def asked() -> bool:
            return bool(await bus.pending_approvals(child["t_b"]))

        await eventually(asked, timeout_s=60)
        (approval,) = await bus.pending_approvals(child["t_b"])
        assert (approval.request.agent_id, approval.request.parent_session_id) == (agent_id_for(parent, "t_b"), parent)
        await approval.allow()
        history = await wait_for(bus, parent, turn_ended, timeout_s=120)
        assert_every_tool_use_answered_once(history)

        # The parent's last request to the model pairs every Agent call (A5.2 shapes, A8.1 rejection).
        last_request = fake.requests(parent)[-1]["body"]
        results = {
            block["tool_use_id"]: block
            for message in last_request["messages"]
            if message["role"] == "user" and isinstance(message["content"], list)
            for block in message["content"]
            if block.get("type") == "tool_result"
        }
        assert sorted(results) == ["t_a", "t_b", "t_c"]
        assert results["t_a"]["content"][0] == {"type": "text", "text": "README says: # demo"}
        assert results["t_a"]["content"][1]["text"].startswith(f"agentId: {agent_id_for(parent, 't_a')} ")
        assert "\ntool_uses: 1\n" in results["t_a"]["content"][1]["text"]
        assert results["t_b"]["content"][0] == {"type": "text", "text": "two"}
        assert (deployment.workspace / "b.txt").exists()  # the approved call ran
        assert (results["t_c"]["content"], results["t_c"]["is_error"]) == (REJECT_MESSAGE, True)
        # Each child was called with its own conversation, system prompt and tools (A3).
        first_a = fake.requests(child["t_a"])[0]["body"]
        assert len(first_a["messages"]) == 1  # a fresh conversation: the prompt, nothing of the parent (A3.2)
        assert "Read README.md and quote it." in json.dumps(first_a["messages"][0]["content"])
        assert [tool["name"] for tool in first_a["tools"]] == ["Read"]
        assert "You review files." in json.dumps(first_a["system"])

        # Four valid transcripts: the parent's and three sidechain files under it (A4).
        main = session_file(deployment.data_dir, deployment.cwd, parent)
        files = [main] + [
            main.with_suffix("") / "subagents" / f"agent-{agent_id_for(parent, tool_id)}.jsonl" for tool_id in child
        ]

        async def all_valid() -> bool:
            return all(path.exists() and verify_transcript(read_transcript(path.read_bytes())).ok for path in files)

        await eventually(all_valid, timeout_s=30)

        # Usage rolls up: the tree's total is the parent's plus every child's.
        tree = await bus.tree_usage(parent)
        parts = [await bus.usage(session) for session in [parent, *child.values()]]
        assert tree.total.requests == sum(part.total.requests for part in parts)
        assert tree.total.requests > parts[0].total.requests >= 2
        assert sorted(tree.sessions) == sorted([parent, *child.values()])


async def test_a3_8_max_turns_lets_the_last_replys_tools_finish_then_stops_and_a6_3_task_events_reach_the_sdk(
    deployment: WorkerCluster, fake: FakeModelProcess
) -> None:
    """A3.8 / R10.6: a child with ``maxTurns: 1`` asks for a Read in its one call: the Read runs and is
    answered (no unpaired tool_use), no second model call is made, a ``max_turns_reached`` attachment ends
    the child's turn (in its log, not in its transcript), and the parent gets the child's last text (A5).
    A6.3: ``bus.converse`` on the parent yields the child's task_started, task_progress (after its Read) and
    task_notification, which reach neither the model nor the parent's transcript."""
    parent = "agents-max-turns-e2e"
    child = child_session_id(parent, agent_id_for(parent, "t_m"))
    fake.script(
        parent,
        [
            reply(agent("t_m", "brief look", "Look at README.md.", "brief"), usage=USAGE),
            reply(text("Done."), usage=USAGE),
        ],
    )
    fake.script(
        child,
        [
            reply(text("Looking once."), tool_use("t_m_read", "Read", file_path="README.md"), usage=USAGE),
            reply(text("A second call must not happen."), usage=USAGE),
        ],
    )
    async with deployment.client() as bus:
        events = [event async for event in bus.converse(parent, "Run a brief agent.", timeout_s=120)]
        assert isinstance(events[-1], TurnEnd)
        assert events[-1].stop_reason == "end_turn"

        # A6.3: the parent's watcher saw the child's task events, typed, in order.
        tasks = [event for event in events if isinstance(event, TaskStarted | TaskProgress | TaskNotification)]
        assert [event.type for event in tasks] == ["task_started", "task_progress", "task_notification"]
        started, progress, done = tasks
        assert isinstance(started, TaskStarted)
        assert (started.task_id, started.tool_use_id, started.description, started.prompt) == (
            agent_id_for(parent, "t_m"),
            "t_m",
            "brief look",
            "Look at README.md.",
        )
        assert isinstance(progress, TaskProgress)
        assert progress.last_tool_name == "Read"
        assert progress.usage["tool_uses"] == 1
        assert progress.usage["total_tokens"] == 120
        assert isinstance(done, TaskNotification)
        assert (done.status, done.summary, done.usage["tool_uses"]) == ("completed", "brief look", 1)
        # ... and nothing of them reached the model (A6.3: SDK-only).
        assert "task_started" not in json.dumps(fake.requests(parent))

        # The child: one model call; its Read answered; the attachment closes its log.
        assert len(fake.requests(child)) == 1
        child_log = await bus.history(child)
        assert_every_tool_use_answered_once(child_log)
        conversational = [e.message for e in child_log if e.message.type in ("user", "assistant", "attachment")]
        last = conversational[-1]
        assert isinstance(last, AttachmentMessage)
        assert last.attachment == {"type": "max_turns_reached", "maxTurns": 1, "turnCount": 2}
        assert conversational[-2].type == "user"  # the Read's result came before it

        # The parent's Agent call got the child's last text (A5.2), not an error.
        last_request = fake.requests(parent)[-1]["body"]
        (result,) = [
            block
            for message in last_request["messages"]
            if message["role"] == "user" and isinstance(message["content"], list)
            for block in message["content"]
            if block.get("type") == "tool_result"
        ]
        assert "is_error" not in result
        assert result["content"][0] == {"type": "text", "text": "Looking once."}
        assert "\ntool_uses: 1\n" in result["content"][1]["text"]

        # Yielded, not recorded (A4.2, R7.5): the child's transcript is valid and holds no attachment.
        path = (
            session_file(deployment.data_dir, deployment.cwd, parent).with_suffix("")
            / "subagents"
            / f"agent-{agent_id_for(parent, 't_m')}.jsonl"
        )

        async def written() -> bool:
            return path.exists() and "t_m_read" in path.read_text() and '"tool_result"' in path.read_text()

        await eventually(written, timeout_s=30)
        assert verify_transcript(read_transcript(path.read_bytes())).ok
        assert '"attachment"' not in path.read_text()
        main = session_file(deployment.data_dir, deployment.cwd, parent)

        async def parent_written() -> bool:
            return main.exists() and "Done." in main.read_text()

        await eventually(parent_written, timeout_s=30)
        assert verify_transcript(read_transcript(main.read_bytes())).ok
        assert "task_" not in main.read_text()  # A6.3: the task events are not recorded
