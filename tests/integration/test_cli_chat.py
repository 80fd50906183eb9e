"""``agentbus chat`` and ``agentbus send --follow`` as real processes against real workers and Redis, the
model's side played through the SDK: text as it streams, ``⏺ Tool(arg)`` lines with their outcomes, one
line per error, and the exit codes (0 end of turn, 1 API error or timeout, 130 interrupted)."""

from __future__ import annotations

import asyncio
import os
import pty
import signal
from dataclasses import dataclass

import pytest

from agentbus_redis.messages.constants import INTERRUPT_MESSAGE
from agentbus_redis.messages.content import TextBlock, ToolUseBlock
from agentbus_redis.messages.factories import create_assistant_api_error_message
from tests.cli.process import AGENTBUS, cli_env
from tests.integration.cluster import TEST_SHARDS, WorkerCluster
from tests.integration.model_side import ModelSide, Reply, delta_text, reply_events, request_id_of, streamed, whole

pytestmark = [pytest.mark.integration, pytest.mark.slow]

SERVER_ERROR = 'API Error: 500 {"type":"error","error":{"type":"api_error","message":"Internal server error"}}'


@pytest.fixture(scope="module")
def workers(module_cluster: WorkerCluster) -> WorkerCluster:
    module_cluster.workspace.mkdir(parents=True, exist_ok=True)
    (module_cluster.workspace / "a.txt").write_text("alpha\n")
    module_cluster.start_all()
    return module_cluster


@dataclass(frozen=True)
class Run:
    code: int
    stdout: str
    stderr: str


async def start_cli(workers: WorkerCluster, *args: str, stdin: bytes | None = None) -> asyncio.subprocess.Process:
    env = cli_env(workers.redis_url, AGENTBUS_SHARDS=str(TEST_SHARDS))
    return await asyncio.create_subprocess_exec(
        *AGENTBUS,
        *args,
        cwd=workers.root,
        env=env,
        stdin=asyncio.subprocess.PIPE if stdin is not None else asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )


async def run_cli(
    workers: WorkerCluster, session: str, replies: list[Reply], *args: str, stdin: bytes | None = None
) -> Run:
    async with workers.client() as bus:
        model = await ModelSide.start(bus, session, replies)
        process = await start_cli(workers, *args, stdin=stdin)
        stdout, stderr = await asyncio.wait_for(process.communicate(stdin), 60)
        if replies:
            await asyncio.wait_for(model, 30)
        else:
            model.cancel()
    assert process.returncode is not None
    return Run(process.returncode, stdout.decode(), stderr.decode())


TOOL_TURN = [
    streamed(
        [TextBlock(text="Let me look."), ToolUseBlock(id="toolu_cli_a", name="Read", input={"file_path": "a.txt"})]
    ),
    streamed([TextBlock(text="It says alpha.")]),
]


async def test_chat_one_shot_streams_text_tool_lines_and_exits_0_at_end_turn(workers: WorkerCluster) -> None:
    run = await run_cli(workers, "cli-chat", TOOL_TURN, "chat", "cli-chat", "what is in a.txt?")
    assert run.code == 0, run.stderr
    lines = run.stdout.splitlines()
    assert lines[0] == "Let me look."
    assert lines[1] == "⏺ Read(a.txt)"
    assert lines[2].startswith("  ⎿  ")
    assert "alpha" in lines[2]
    assert lines[3:] == ["It says alpha."]
    assert run.stderr == ""


async def test_send_follow_prints_the_turn_like_chat(workers: WorkerCluster) -> None:
    run = await run_cli(
        workers, "cli-send-follow", TOOL_TURN, "send", "cli-send-follow", "what is in a.txt?", "--follow"
    )
    assert run.code == 0, run.stderr
    assert run.stdout.splitlines()[1] == "⏺ Read(a.txt)"
    assert run.stdout.splitlines()[-1] == "It says alpha."


async def test_chat_reads_a_piped_prompt(workers: WorkerCluster) -> None:
    run = await run_cli(
        workers,
        "cli-chat-stdin",
        [streamed([TextBlock(text="Piped, got it.")])],
        "chat",
        "cli-chat-stdin",
        stdin=b"hi\n",
    )
    assert (run.code, run.stdout) == (0, "Piped, got it.\n")


async def test_m7_api_error_is_one_line_and_exit_1(workers: WorkerCluster) -> None:
    error = whole(create_assistant_api_error_message(SERVER_ERROR, error="server_error"))
    run = await run_cli(workers, "cli-chat-error", [error], "chat", "cli-chat-error", "hello")
    assert run.code == 1
    assert run.stderr.splitlines() == [f"agentbus: {SERVER_ERROR}"]


async def test_no_progress_times_out_with_one_line_and_exit_1(workers: WorkerCluster) -> None:
    run = await run_cli(workers, "cli-chat-silent", [], "chat", "cli-chat-silent", "anyone?", "--timeout", "0.5")
    assert run.code == 1
    (line,) = run.stderr.splitlines()
    assert line.startswith(
        "agentbus: session cli-chat-silent: no progress for 0.5s while waiting for the model's reply"
    )


async def test_r10_1_ctrl_c_during_a_reply_interrupts_the_session_and_exits_130(workers: WorkerCluster) -> None:
    session = "cli-chat-interrupt"
    events = reply_events([TextBlock(text="A long story that never gets to its end, sadly for everyone.")])
    half = next(n for n, e in enumerate(events) if e["type"] == "content_block_delta") + 1
    request_id = request_id_of(session)

    async def half_a_reply(bus: object, sid: str) -> None:
        for event in events[:half]:
            await bus.send_stream_event(sid, request_id, event)  # type: ignore[attr-defined]

    async with workers.client() as bus:
        model = await ModelSide.start(bus, session, [half_a_reply])
        process = await start_cli(workers, "chat", session, "tell me a story")
        assert process.stdout is not None
        assert process.stderr is not None
        first = await asyncio.wait_for(process.stdout.read(10), 30)  # the reply is streaming
        process.send_signal(signal.SIGINT)
        rest, stderr = await asyncio.wait_for(asyncio.gather(process.stdout.read(), process.stderr.read()), 30)
        await process.wait()
        await model
        history = await bus.history(session)
    assert process.returncode == 130
    assert (first + rest).decode() == delta_text(events[half - 1]) + "\n"
    assert stderr.decode().splitlines() == ["  ⎿  Interrupted by user"]
    assert history[-1].message.to_wire()["message"] == {
        "role": "user",
        "content": [{"type": "text", "text": INTERRUPT_MESSAGE}],
    }


class Terminal:
    """The master side of a pseudo-terminal: what the program wrote, read as it comes."""

    def __init__(self, master: int) -> None:
        self.master = master
        self.seen = ""
        self.position = 0

    async def wait_for(self, text: str, timeout_s: float = 30) -> None:
        """Wait until ``text`` appears after what an earlier wait matched."""
        async with asyncio.timeout(timeout_s):
            while (found := self.seen.find(text, self.position)) < 0:
                chunk = await asyncio.to_thread(os.read, self.master, 4096)
                self.seen += chunk.decode(errors="replace")
        self.position = found + len(text)

    def type(self, keys: bytes) -> None:
        os.write(self.master, keys)


async def test_chat_interactive_loop_ctrl_c_interrupts_the_reply_then_the_next_prompt_ctrl_d_exits(
    workers: WorkerCluster,
) -> None:
    session = "cli-chat-repl"
    events = reply_events([TextBlock(text="A story that the user stops half way through, as users do.")])
    half = next(n for n, e in enumerate(events) if e["type"] == "content_block_delta") + 1
    request_id = request_id_of(session)

    async def half_a_reply(bus: object, sid: str) -> None:
        for event in events[:half]:
            await bus.send_stream_event(sid, request_id, event)  # type: ignore[attr-defined]

    master, slave = pty.openpty()
    async with workers.client() as bus:
        model = await ModelSide.start(bus, session, [half_a_reply, streamed([TextBlock(text="Second answer.")])])
        process = await asyncio.create_subprocess_exec(
            *AGENTBUS,
            "chat",
            session,
            cwd=workers.root,
            env=cli_env(workers.redis_url, AGENTBUS_SHARDS=str(TEST_SHARDS)),
            stdin=slave,
            stdout=slave,
            stderr=slave,
        )
        os.close(slave)
        terminal = Terminal(master)
        try:
            await terminal.wait_for("> ")
            terminal.type(b"tell me a story\n")
            await terminal.wait_for(delta_text(events[half - 1]))  # streaming
            process.send_signal(signal.SIGINT)  # what Ctrl-C sends the terminal's foreground process
            await terminal.wait_for("Interrupted by user")
            await terminal.wait_for("> ")  # back at the prompt
            terminal.type(b"and now?\n")
            await terminal.wait_for("Second answer.")
            await terminal.wait_for("> ")
            terminal.type(b"\x04")  # Ctrl-D
            assert await asyncio.wait_for(process.wait(), 30) == 0
            await model
        finally:
            if process.returncode is None:
                process.kill()
            os.close(master)


async def test_r10_1_ctrl_c_before_any_reply_closes_the_turn_once_ingestion_applied_the_interrupt(
    workers: WorkerCluster,
) -> None:
    session = "cli-chat-interrupt-early"
    async with workers.client() as bus:
        process = await start_cli(workers, "chat", session, "think hard")
        async for _ in bus.follow(session):  # the prompt is logged: the turn has begun, no model answers it
            break
        process.send_signal(signal.SIGINT)
        stdout, stderr = await asyncio.wait_for(process.communicate(), 30)
    assert process.returncode == 130
    assert stdout == b""
    assert stderr.decode().splitlines() == ["  ⎿  Interrupted by user"]  # not the grace period's message
