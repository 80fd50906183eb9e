"""Issue 18, the loop closed end to end: ``bus.converse`` and ``agentbus chat`` against every worker as a
process — the model worker included — and the fake Anthropic-compatible server over real HTTP, scripted
per session: a tool call, then text. The watcher sees the text as the model streams it, the call, its
result and the turn's end; nothing of the model's side is played by the test."""

from __future__ import annotations

import asyncio
import uuid

import pytest

from agentbus_redis.sdk.conversation import ConversationEvent, TextDelta, ToolCall, ToolResult, TurnEnd
from tests.cli.process import AGENTBUS, cli_env
from tests.integration.cluster import TEST_SHARDS, WorkerCluster
from tests.integration.fake_model import FakeModelProcess
from tests.integration.model_turns import reply, text, tool_use

pytestmark = [pytest.mark.integration, pytest.mark.slow]

FIRST = "I'll read the README first, then tell you what this workspace is about."
CHUNK_DELAY_MS = 40
"""Between the fake server's SSE events of the answer: it streams slower than ingestion applies it."""
ANSWER = "The README says this is a demo workspace for agentbus, with one heading and nothing else yet."


@pytest.fixture(scope="module")
def deployment(module_cluster: WorkerCluster, fake: FakeModelProcess) -> WorkerCluster:
    module_cluster.extra_env.update(
        {
            "ANTHROPIC_API_KEY": "sk-ant-test",
            "AGENTBUS_MODEL__BASE_URL": fake.base_url,
            "AGENTBUS_MODEL__MODEL": "claude-sonnet-4-6",
        }
    )
    for name in ("ingestion", "normalization", "transcripts", "tools", "model"):
        module_cluster.start(name)
    module_cluster.wait_ready(timeout_s=240)  # five Python processes start slowly on a loaded machine
    (module_cluster.workspace / "README.md").write_text("# demo workspace\n", encoding="utf-8")
    return module_cluster


def tool_then_text(fake: FakeModelProcess, session: str) -> None:
    fake.script(
        session,
        [
            reply(text(FIRST), tool_use("toolu_readme", "Read", file_path="README.md")),
            reply(text(ANSWER), chunk_delay_ms=CHUNK_DELAY_MS),
        ],
    )


async def test_converse_through_the_model_worker_streams_text_the_call_its_result_and_the_turn_end(
    deployment: WorkerCluster, fake: FakeModelProcess
) -> None:
    session = f"converse-model-{uuid.uuid4().hex[:8]}"
    tool_then_text(fake, session)
    async with deployment.client() as bus:
        events: list[ConversationEvent] = [
            e async for e in bus.converse(session, "what is this workspace?", timeout_s=60)
        ]
    deltas = [e.text for e in events if isinstance(e, TextDelta)]
    assert "".join(deltas) == FIRST + ANSWER
    # The answer streamed slowly: its text_deltas (M2) reached the watcher as several live deltas.
    assert len(deltas) > 2
    (call,) = [e for e in events if isinstance(e, ToolCall)]
    assert (call.tool_use_id, call.name, call.summary) == ("toolu_readme", "Read", "README.md")
    (result,) = [e for e in events if isinstance(e, ToolResult)]
    assert result.ok
    assert "# demo workspace" in result.first_line
    kinds = [e.type for e in events]
    assert kinds.index("tool_call") < kinds.index("tool_result") < kinds.index("turn_end") == len(kinds) - 1
    end = events[-1]
    assert isinstance(end, TurnEnd)
    assert (end.stop_reason, end.error, end.replies) == ("end_turn", None, 2)
    assert end.usage is not None


async def test_agentbus_chat_through_the_model_worker(deployment: WorkerCluster, fake: FakeModelProcess) -> None:
    session = f"chat-model-{uuid.uuid4().hex[:8]}"
    tool_then_text(fake, session)
    process = await asyncio.create_subprocess_exec(
        *AGENTBUS,
        "chat",
        session,
        "what is this workspace?",
        cwd=deployment.root,
        env=cli_env(deployment.redis_url, AGENTBUS_SHARDS=str(TEST_SHARDS)),
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    stdout, stderr = await asyncio.wait_for(process.communicate(), 90)
    assert process.returncode == 0, stderr.decode()
    lines = stdout.decode().splitlines()
    assert lines[:2] == [FIRST, "⏺ Read(README.md)"]
    assert "# demo workspace" in lines[2]
    assert lines[3:] == [ANSWER]
