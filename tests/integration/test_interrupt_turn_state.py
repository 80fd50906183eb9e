"""R10.1 with nothing streamed, through real workers (ingestion, normalization, transcripts, tools; no model
worker, so a published request stays pending): an interrupt while the model is due ends the turn with
``[Request interrupted by user]`` — in the log, the transcript and the next request, as Claude Code's would —
and an interrupt while the session is idle (its turn over) writes nothing (bus/turn_state.py). R8.9 with a
command running: esc stops it, a message typed meanwhile does not (bus/interrupts.py)."""

from __future__ import annotations

import json
import subprocess
import uuid

import pytest

from agentbus_redis.config.settings import Settings
from agentbus_redis.messages.constants import (
    INTERRUPT_MESSAGE,
    INTERRUPT_MESSAGE_FOR_TOOL_USE,
    REJECT_MESSAGE,
    USER_REJECTED_TOOL_USE,
)
from agentbus_redis.messages.content import TextBlock, ToolUseBlock
from agentbus_redis.messages.factories import create_assistant_message
from agentbus_redis.messages.kinds import UserMessage
from agentbus_redis.sdk.client import AgentbusClient
from agentbus_redis.sdk.replay import wait_until_persisted
from tests.integration.approval_helpers import reply_with, result_block, result_for
from tests.integration.cluster import WorkerCluster, eventually

pytestmark = [pytest.mark.integration, pytest.mark.slow]


@pytest.fixture(scope="module")
def workers(module_cluster: WorkerCluster) -> WorkerCluster:
    # Commands outlive the interrupts sent while they run (the suite's default tool timeout is 2 s).
    module_cluster.extra_env["AGENTBUS_TOOLS__TIMEOUT_S"] = "60"
    module_cluster.start_all()
    return module_cluster


def settings_of(cluster: WorkerCluster) -> Settings:
    return Settings(
        redis_url=cluster.redis_url, data_dir=cluster.data_dir, shards=cluster.names.shards, cwd=cluster.cwd
    )


async def user_texts(bus: AgentbusClient, session: str) -> list[str]:
    return [
        block.text
        for entry in await bus.history(session)
        if isinstance(entry.message, UserMessage)
        for block in entry.message.blocks
        if isinstance(block, TextBlock)
    ]


async def test_r10_1_interrupt_with_the_request_pending_ends_the_turn_with_the_text(workers: WorkerCluster) -> None:
    session = "interrupt-pending"
    async with workers.client() as bus:
        first = await bus.send_prompt_and_wait(session, "go")  # published; no model answers it
        await bus.interrupt(session)

        async def logged() -> bool:
            return await user_texts(bus, session) == ["go", INTERRUPT_MESSAGE]

        await eventually(logged, timeout_s=60)
        history = await bus.history(session)
        prompt, notice = (entry.message for entry in history)
        assert isinstance(notice, UserMessage)
        assert notice.parent_uuid == prompt.uuid  # type: ignore[union-attr]
        assert notice.message.content == [TextBlock(text=INTERRUPT_MESSAGE)]  # R2.2c: array form, not meta
        assert notice.is_meta is None
        # The interrupt closed the turn: no request for it; the next prompt's request carries it (R4.10 merge).
        assert (await bus.latest_request(session)) == first
        following = await bus.send_prompt_and_wait(session, "next", timeout_s=60)
        assert following.request["messages"] == [
            {
                "role": "user",
                "content": [
                    {"type": "text", "text": "go\n"},
                    {"type": "text", "text": f"{INTERRUPT_MESSAGE}\n"},
                    {"type": "text", "text": "next"},
                ],
            }
        ]
        path = await wait_until_persisted(bus, session, settings=settings_of(workers), timeout_s=60)
    lines = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]
    assert [line["message"]["content"] for line in lines] == [
        "go",
        [{"type": "text", "text": INTERRUPT_MESSAGE}],
        "next",
    ]
    assert lines[1]["parentUuid"] == lines[0]["uuid"]


async def test_r10_interrupt_while_idle_after_a_finished_turn_writes_nothing(workers: WorkerCluster) -> None:
    session = "interrupt-idle"
    settings = settings_of(workers)
    async with workers.client() as bus:
        await bus.send_prompt_and_wait(session, "hi")
        reply = create_assistant_message("Hello.")
        reply = reply.model_copy(update={"message": reply.message.model_copy(update={"stop_reason": "end_turn"})})
        await bus.send_assistant(session, reply)
        await wait_until_persisted(bus, session, settings=settings, timeout_s=60)
        before = await bus.history(session)
        assert len(before) == 2
        await bus.interrupt(session)
        await wait_until_persisted(bus, session, settings=settings, timeout_s=60)  # ingestion applied it
        assert await bus.history(session) == before
        following = await bus.send_prompt_and_wait(session, "next", timeout_s=60)
    assert following.request["messages"] == [
        {"role": "user", "content": "hi"},
        {"role": "assistant", "content": [{"type": "text", "text": "Hello."}]},
        {"role": "user", "content": "next"},
    ]


def _running(command: str) -> bool:
    """Whether a process runs ``command`` (a tool's own, in or out of the sandbox)."""
    return subprocess.run(["pgrep", "-f", command], capture_output=True, check=False).returncode == 0


async def _bash_running(bus: AgentbusClient, session: str, seconds: int) -> tuple[ToolUseBlock, str]:
    """A turn whose reply calls Bash ``sleep <seconds>.<digits>``, once that command runs in the tools worker; and
    the command. The digits are this run's own, so another suite on the machine (its processes are looked up by
    their command line) never passes for this one."""
    command = f"sleep {seconds}.{uuid.uuid4().int % 10**9:09d}"
    call = ToolUseBlock(id=f"toolu_nap_{uuid.uuid4().hex[:8]}", name="Bash", input={"command": command})
    await reply_with(bus, session, call)

    async def started() -> bool:
        return _running(command)

    await eventually(started, timeout_s=60)
    return call, command


async def test_r8_9_esc_stops_a_running_bash_at_once(workers: WorkerCluster) -> None:
    """``user_cancel`` (esc; also what ``agents stop`` sends a sub-agent, A8.3/A8.4) stops every running call,
    Bash (interrupt behaviour ``block``) too: its process is killed and the call answered with the rejection,
    then the turn ends with the tool-use interrupt text (R10.2). It was left to run to its end (an hour here)."""
    session = f"esc-bash-{uuid.uuid4().hex[:6]}"
    async with workers.client() as bus:
        call, command = await _bash_running(bus, session, 3607)
        await bus.interrupt(session, reason="user_cancel")
        answer = await result_for(bus, session, call.id)
        assert result_block(answer).content == REJECT_MESSAGE
        assert answer.tool_use_result == USER_REJECTED_TOOL_USE

        async def ended() -> bool:
            return INTERRUPT_MESSAGE_FOR_TOOL_USE in await user_texts(bus, session) and not _running(command)

        await eventually(ended, timeout_s=60)


async def test_r8_9_a_message_typed_while_bash_runs_lets_it_finish(workers: WorkerCluster) -> None:
    """``interrupt`` (the user typed while tools run) cancels only ``cancel`` tools: Bash runs to its end and
    answers with its own result."""
    session = f"typed-bash-{uuid.uuid4().hex[:6]}"
    async with workers.client() as bus:
        call, _ = await _bash_running(bus, session, 5)
        await bus.interrupt(session, reason="interrupt")
        answer = result_block(await result_for(bus, session, call.id))
        assert answer.content != REJECT_MESSAGE
        assert not answer.is_error
