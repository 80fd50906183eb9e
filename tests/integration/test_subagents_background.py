"""Background sub-agents and SendMessage (agent-loop.md A1.2, A3.4, A4.4, A5.3, A5.4, A8.3, H8.2) through real
worker processes (the model worker included), a real Redis and the fake Anthropic-compatible server over
real HTTP, scripted per session (children by their derived session ids).

- A5.3/A5.4: a background launch is answered at once (exact text, a readable ``output_file``); the child's
  end reaches the idle parent as a queued ``<task-notification>`` that starts the parent's next model turn
  (sent inside a ``<system-reminder>`` after the "not user input" preamble, as Claude Code 2.1.332 sends it);
  ``SendMessage`` to the background child answers at once and notifies again.
- A8.3/H8.2: a background child survives its parent's interrupt, its "ask" is denied with
  AUTO_REJECT_MESSAGE even under ``ask_policy=approve``; ``agentbus agents stop`` kills it and the parent is
  notified ``killed`` with the partial result.
- A4.4: ``SendMessage`` continues a foreground child (its history, its transcript's chain) and answers as
  A5; unknown agents, another session's agent and a running agent are typed errors.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from agentbus_redis.agents.background import async_launched_text, output_file_path
from agentbus_redis.agents.ids import agent_id_for, child_session_id
from agentbus_redis.agents.send_message import continued_in_background_text, not_a_child, still_running, unknown_agent
from agentbus_redis.messages.constants import INTERRUPT_MESSAGE_FOR_TOOL_USE, auto_reject_message
from agentbus_redis.normalize.attachments.rendered import TASK_NOTIFICATION_PREAMBLE
from agentbus_redis.sdk.client import AgentbusClient
from agentbus_redis.transcript import read_transcript, verify_transcript
from agentbus_redis.transcript_files.layout import session_file
from tests.cli.process import agentbus, cli_env
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
from tests.integration.test_subagents import restart

pytestmark = [pytest.mark.integration, pytest.mark.slow]

USAGE = {"input_tokens": 100, "output_tokens": 20}


@pytest.fixture(scope="module")
def deployment(module_cluster: WorkerCluster, fake: FakeModelProcess) -> WorkerCluster:
    module_cluster.extra_env.update(
        {
            "ANTHROPIC_API_KEY": "sk-ant-test",
            "AGENTBUS_MODEL__BASE_URL": fake.base_url,
            "AGENTBUS_MODEL__MODEL": "claude-sonnet-4-6",
            "AGENTBUS_TOOLS__ASK_POLICY": "approve",
            # The sleeping tools must outlive the steps of a test: they end by an interrupt or a stop.
            "AGENTBUS_TOOLS__TIMEOUT_S": "120",
            "AGENTBUS_TOOLS__DEADLINE_S": "300",
        }
    )
    for name in ("ingestion", "normalization", "transcripts", "tools", "model"):
        module_cluster.start(name)
    module_cluster.wait_ready(timeout_s=240)
    module_cluster.workspace.mkdir(parents=True, exist_ok=True)
    (module_cluster.workspace / "README.md").write_text("# demo\n", encoding="utf-8")
    return module_cluster


def agent(tool_id: str, description: str, prompt: str, *, background: bool = False) -> dict[str, Any]:
    arguments: dict[str, Any] = {"description": description, "prompt": prompt}
    if background:
        arguments["run_in_background"] = True
    return tool_use(tool_id, "Agent", **arguments)


def send_message(tool_id: str, to: str, message: str) -> dict[str, Any]:
    return tool_use(tool_id, "SendMessage", to=to, message=message)


def tool_results(request_body: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {
        block["tool_use_id"]: block
        for message in request_body["messages"]
        if message["role"] == "user" and isinstance(message["content"], list)
        for block in message["content"]
        if block.get("type") == "tool_result"
    }


def result_text(block: dict[str, Any]) -> str:
    content = block["content"]
    return content if isinstance(content, str) else "\n".join(part.get("text", "") for part in content)


def user_texts(request_body: dict[str, Any]) -> list[str]:
    """Every text the user side says in a request (prompt strings and text blocks)."""
    found: list[str] = []
    for message in request_body["messages"]:
        if message["role"] != "user":
            continue
        content = message["content"]
        if isinstance(content, str):
            found.append(content)
        else:
            found += [block["text"] for block in content if block.get("type") == "text"]
    return found


def conversation(request_body: dict[str, Any]) -> list[tuple[str, str]]:
    """Each message of a request as (role, its text) — without the request's cache breakpoints (M9)."""
    turns: list[tuple[str, str]] = []
    for message in request_body["messages"]:
        content = message["content"]
        said = content if isinstance(content, str) else "".join(b.get("text", "") for b in content)
        turns.append((message["role"], said))
    return turns


NOTIFICATION_WRAPPER = (f"<system-reminder>\n{TASK_NOTIFICATION_PREAMBLE}", "\n</system-reminder>")


def notifications(request_body: dict[str, Any]) -> list[str]:
    """Each ``<task-notification>`` (A5.4) a request carries, unwrapped. Claude Code 2.1.332 sends a
    ``task-notification`` user message inside a ``<system-reminder>`` after a preamble saying it is no user
    input (its normalization wraps it; tests/compat compares our requests with the client's), so that is the
    only form accepted: a bare notification in a request fails here."""
    found: list[str] = []
    for said in user_texts(request_body):
        opening, closing = NOTIFICATION_WRAPPER
        inner = said.removeprefix(opening).removesuffix(closing)
        if len(inner) == len(said) - len(opening) - len(closing) and inner.startswith("<task-notification>"):
            found.append(inner)
        else:
            assert "<task-notification>" not in said, f"a task notification not sent as the client sends it: {said!r}"
    return found


async def wait_for_text(bus: AgentbusClient, session: str, needle: str) -> list[Any]:
    """The session's log once ``needle`` appears in it."""
    return await wait_for(bus, session, lambda h: needle in json.dumps([e.message.to_wire() for e in h]), timeout_s=120)


async def valid(path: Path) -> bool:
    return path.exists() and verify_transcript(read_transcript(path.read_bytes())).ok


async def test_a5_3_a5_4_background_child_answers_at_once_notifies_the_idle_parent_and_continues_by_send_message(
    deployment: WorkerCluster, fake: FakeModelProcess
) -> None:
    parent = "bg-notify"
    agent_id = agent_id_for(parent, "t_bg")
    child = child_session_id(parent, agent_id)
    output = output_file_path(str(deployment.workspace.resolve()), agent_id)
    fake.script(
        parent,
        [
            reply(text("Launching."), agent("t_bg", "read readme", "Read README.md.", background=True), usage=USAGE),
            reply(tool_use("t_peek", "Read", file_path=output), usage=USAGE),
            reply(text("It runs in the background."), usage=USAGE),
            # The notification started this turn (the parent was idle): continue the child in the background.
            reply(send_message("t_again", agent_id, "Read it once more."), usage=USAGE),
            reply(text("Asked again."), usage=USAGE),
            reply(text("Both passes reported."), usage=USAGE),
        ],
    )
    fake.script(
        child,
        [
            reply(tool_use("c_read", "Read", file_path="README.md"), usage=USAGE),
            reply(text("README says: # demo"), usage=USAGE),
            reply(text("Second pass: still # demo"), usage=USAGE),
        ],
    )
    async with deployment.client() as bus:
        await bus.send_prompt(parent, "Read the README in the background.")
        await wait_for_text(bus, parent, "Both passes reported.")
        history = await wait_for(bus, parent, turn_ended, timeout_s=120)
        assert_every_tool_use_answered_once(history)
        requests = [entry["body"] for entry in fake.requests(parent)]

        # A5.3: answered at once with the exact text (the parent has Read and Bash: the output_file variant).
        launched = tool_results(requests[1])["t_bg"]
        assert "is_error" not in launched
        assert result_text(launched) == async_launched_text(agent_id, output_file=output, caller_can_read=True)
        assert not notifications(requests[1])
        # The output file is in the workspace: the parent's Read of it is no error.
        assert "is_error" not in tool_results(requests[2])["t_peek"]
        # A3.4: the child runs with the background tool set (no Agent, no SendMessage).
        child_tools = [tool["name"] for tool in fake.requests(child)[0]["body"]["tools"]]
        assert child_tools == ["Bash", "Edit", "Glob", "Grep", "Read", "Write"]

        # A5.4: the notification is the prompt of the parent's 4th request, exact, and only once.
        (notification,) = notifications(requests[3])
        assert notification.startswith(
            f"<task-notification>\n<task-id>{agent_id}</task-id>\n<tool-use-id>t_bg</tool-use-id>\n"
            f"<output-file>{output}</output-file>\n<status>completed</status>\n"
            '<summary>Agent "read readme" completed</summary>\n<result>README says: # demo</result>\n'
            "<usage><total_tokens>"
        )
        assert re.search(
            r"<usage><total_tokens>\d+</total_tokens><tool_uses>1</tool_uses><duration_ms>\d+</duration_ms></usage>\n"
            r"</task-notification>$",
            notification,
        )
        prompt_line = next(
            e.message for e in history if e.message.type == "user" and "<task-id>" in json.dumps(e.message.to_wire())
        )
        assert prompt_line.to_wire()["origin"] == {"kind": "task-notification"}

        # SendMessage to a background child: answered at once, notified again with the new call's id.
        again = tool_results(requests[4])["t_again"]
        assert result_text(again) == continued_in_background_text(agent_id, output_file=output)
        second = [n for request in requests for n in notifications(request) if "<tool-use-id>t_again<" in n]
        assert len(second) >= 1
        assert "<result>Second pass: still # demo</result>" in second[0]
        assert conversation(fake.requests(child)[2]["body"])[-1] == ("user", "Read it once more.")
        assert sum(len(notifications(request)) for request in requests[-1:]) == 2  # each notified once

        # The output file holds the child's conversation; its transcript is valid and continued.
        lines = [json.loads(line) for line in Path(output).read_text().splitlines()]
        assert [line["type"] for line in lines][:2] == ["user", "assistant"]
        assert "Second pass: still # demo" in json.dumps(lines[-1])
        sidechain = (
            session_file(deployment.data_dir, deployment.cwd, parent).with_suffix("")
            / "subagents"
            / f"agent-{agent_id}.jsonl"
        )
        await eventually(lambda: valid(sidechain), timeout_s=60)
        await eventually(lambda: valid(session_file(deployment.data_dir, deployment.cwd, parent)), timeout_s=60)
        tree = await bus.session_tree(parent)
        assert [(node.agent_id, node.status) for node in tree.children] == [(agent_id, "completed")]


async def test_a8_3_a_background_child_survives_its_parents_interrupt_h8_2_cannot_ask_and_is_killed_by_agents_stop(
    deployment: WorkerCluster, fake: FakeModelProcess
) -> None:
    parent = "bg-kill"
    agent_id = agent_id_for(parent, "t_watch")
    child = child_session_id(parent, agent_id)
    fake.script(
        parent,
        [
            reply(agent("t_watch", "watch", "Watch.", background=True), tool_use("t_nap", "Bash", command="sleep 30")),
            reply(text("Noted: the watcher was stopped."), usage=USAGE),
        ],
    )
    fake.script(
        child,
        [
            reply(tool_use("c_touch", "Bash", command="touch bg.txt"), usage=USAGE),
            reply(text("Halfway."), tool_use("c_nap", "Bash", command="sleep 60"), usage=USAGE),
        ],
    )
    async with deployment.client() as bus:
        await bus.send_prompt(parent, "Watch in the background, and nap.")
        await wait_for_text(bus, child, "c_nap")
        await wait_for_text(bus, parent, "Async agent launched")
        await bus.interrupt(parent)
        await wait_for_text(bus, parent, INTERRUPT_MESSAGE_FOR_TOOL_USE)

        # H8.2: the background child's "ask" was denied with AUTO_REJECT_MESSAGE, nobody was asked.
        child_requests = [entry["body"] for entry in fake.requests(child)]
        touched = tool_results(child_requests[1])["c_touch"]
        assert (result_text(touched), touched["is_error"]) == (auto_reject_message("Bash"), True)
        assert not (deployment.workspace / "bg.txt").exists()
        assert await bus.pending_approvals(child) == []

        # A8.3: stopped only explicitly (the CLI); the parent is notified `killed` with the partial result.
        env = cli_env(deployment.redis_url, AGENTBUS_SHARDS=str(deployment.names.shards))
        stopped = agentbus("agents", "stop", agent_id, cwd=deployment.root, env=env)
        assert stopped.code == 0, stopped.stderr
        assert child in stopped.stdout
        history = await wait_for_text(bus, parent, "Noted: the watcher")
        await wait_for(bus, parent, turn_ended, timeout_s=120)
        (notification,) = notifications(fake.requests(parent)[-1]["body"])
        assert (
            '<status>killed</status>\n<summary>Agent "watch" was stopped</summary>\n<result>Halfway.</result>'
        ) in notification
        assert_every_tool_use_answered_once(history)
        # The parent's interrupt did not cascade to it (no agent_stop entry), and it ended `killed`.
        rows: Any = await bus.redis.xrange(bus.topology.ingress_for(child))
        assert not [row for row in rows if b"agent_stop:" in row[1][b"data"]]
        assert (await bus.session_tree(parent)).children[0].status == "killed"
        again = agentbus("agents", "stop", agent_id, cwd=deployment.root, env=env)
        assert again.code == 1
        assert f"sub-agent {child} is not running (status: killed)" in again.stderr


async def test_a4_4_send_message_continues_a_foreground_child_and_refuses_unknown_foreign_and_running_agents(
    deployment: WorkerCluster, fake: FakeModelProcess
) -> None:
    parent, other, sleeper_parent = "sm-parent", "sm-other", "sm-sleeper"
    counter = agent_id_for(parent, "t_count")
    counter_child = child_session_id(parent, counter)
    fake.script(
        parent,
        [
            reply(agent("t_count", "count", "Count to one."), usage=USAGE),
            reply(
                send_message("t_send", counter, "Now count to two."),
                send_message("t_unknown", "a0000000000000000", "Hello?"),
                usage=USAGE,
            ),
            reply(text("Counted to two."), usage=USAGE),
        ],
    )
    fake.script(counter_child, [reply(text("one"), usage=USAGE), reply(text("two"), usage=USAGE)])
    fake.script(other, [reply(send_message("t_foreign", counter, "Hi.")), reply(text("Not mine."))])
    sleeper = agent_id_for(sleeper_parent, "t_sleep")
    fake.script(
        sleeper_parent,
        [
            reply(agent("t_sleep", "sleeper", "Sleep.", background=True)),
            reply(send_message("t_early", sleeper, "Are you done?")),
            reply(text("It is busy.")),
            reply(text("It was stopped.")),
        ],
    )
    fake.script(child_session_id(sleeper_parent, sleeper), [reply(tool_use("c_sleep", "Bash", command="sleep 60"))])
    async with deployment.client() as bus:
        await bus.send_prompt(parent, "Count.")
        history = await wait_for_text(bus, parent, "Counted to two.")
        assert_every_tool_use_answered_once(history)
        last = fake.requests(parent)[-1]["body"]
        results = tool_results(last)
        # A5 again: the child's new final text, then the agentId/usage trailer.
        assert results["t_send"]["content"][0] == {"type": "text", "text": "two"}
        assert results["t_send"]["content"][1]["text"].startswith(f"agentId: {counter} (use SendMessage with to: ")
        assert "\ntool_uses: 0\n" in results["t_send"]["content"][1]["text"]
        assert (result_text(results["t_unknown"]), results["t_unknown"]["is_error"]) == (
            f"<tool_use_error>{unknown_agent('a0000000000000000')}</tool_use_error>",
            True,
        )
        # A4.4: the child continued its own conversation, and its transcript chains from its latest leaf.
        assert conversation(fake.requests(counter_child)[1]["body"]) == [
            ("user", "Count to one."),
            ("assistant", "one"),
            ("user", "Now count to two."),
        ]
        sidechain = (
            session_file(deployment.data_dir, deployment.cwd, parent).with_suffix("")
            / "subagents"
            / f"agent-{counter}.jsonl"
        )

        async def four_lines() -> bool:
            return await valid(sidechain) and len(sidechain.read_text().splitlines()) == 4

        await eventually(four_lines, timeout_s=60)
        lines = [json.loads(line) for line in sidechain.read_text().splitlines()]
        assert [line["parentUuid"] for line in lines] == [None, *[line["uuid"] for line in lines[:-1]]]
        assert all(line["agentId"] == counter and line["isSidechain"] is True for line in lines)

        # Another session's agent is not this session's to continue.
        await bus.send_prompt(other, "Talk to someone else's agent.")
        await wait_for_text(bus, other, "Not mine.")
        foreign = tool_results(fake.requests(other)[-1]["body"])["t_foreign"]
        assert result_text(foreign) == f"<tool_use_error>{not_a_child(counter)}</tool_use_error>"

        # A running agent cannot take a message yet; the SDK stops it (A8.3) and the parent hears `killed`.
        await bus.send_prompt(sleeper_parent, "Start a sleeper.")
        await wait_for_text(bus, sleeper_parent, "It is busy.")
        early = tool_results(fake.requests(sleeper_parent)[-1]["body"])["t_early"]
        assert result_text(early) == f"<tool_use_error>{still_running(sleeper)}</tool_use_error>"
        stopped = await bus.stop_agent(sleeper)
        assert stopped.session_id == child_session_id(sleeper_parent, sleeper)
        await wait_for_text(bus, sleeper_parent, "It was stopped.")
        (notification,) = notifications(fake.requests(sleeper_parent)[-1]["body"])
        assert '<status>killed</status>\n<summary>Agent "sleeper" was stopped</summary>\n<usage>' in notification


async def test_sigkill_of_ingestion_while_a_background_child_ends_notifies_its_parent_exactly_once(
    deployment: WorkerCluster, fake: FakeModelProcess
) -> None:
    """Issue 19 "loses nothing and duplicates nothing": the child's end is committed, or not, or not yet
    relayed when ingestion dies; the new owner's relay or its sweep notifies the parent, once (the
    notification's key is the call's)."""
    parent = "bg-sigkill"
    agent_id = agent_id_for(parent, "t_k")
    child = child_session_id(parent, agent_id)
    fake.script(
        parent,
        [
            reply(agent("t_k", "nap", "Nap, then say done.", background=True), usage=USAGE),
            reply(text("Waiting for the nap."), usage=USAGE),
            reply(text("The nap is over."), usage=USAGE),
        ],
    )
    fake.script(
        child,
        [reply(tool_use("c_sleep", "Bash", command="sleep 2"), usage=USAGE), reply(text("done"), usage=USAGE)],
    )
    async with deployment.client() as bus:
        await bus.send_prompt(parent, "Nap in the background.")
        await wait_for_text(bus, child, "c_sleep")
        (ingestion,) = [worker for worker in deployment.of("ingestion") if worker.process.poll() is None]
        deployment.kill(ingestion)  # while the child's tool runs: its result and final reply wait in ingress
        await restart(deployment, "ingestion")
        history = await wait_for_text(bus, parent, "The nap is over.")
        said = [json.dumps(e.message.to_wire()) for e in history if e.message.type == "user"]
        assert len([line for line in said if "<task-notification>" in line]) == 1
        assert "<result>done</result>" in next(line for line in said if "<task-notification>" in line)
        assert (await bus.session_tree(parent)).children[0].status == "completed"
