"""Issue 18, "the loop, closed": ``bus.converse(session, prompt)`` against real worker processes (ingestion,
tools, normalization, transcripts) and a real Redis, the model's side played through the SDK.

A turn streams its text as it arrives, shows each tool call and its result, never ends while a call is
waiting for its result, and ends when the model's turn does (end_turn, an API error, max_tokens, an
interrupt) — or with a typed timeout when nothing happens.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import Any

import pytest

from agentbus_redis.messages.constants import INTERRUPT_MESSAGE, max_output_tokens_error
from agentbus_redis.messages.content import ContentBlock, TextBlock, ToolUseBlock
from agentbus_redis.messages.factories import create_assistant_api_error_message, create_assistant_message
from agentbus_redis.messages.kinds import UserMessage
from agentbus_redis.sdk.client import AgentbusClient
from agentbus_redis.sdk.conversation import (
    ApiError,
    ConversationEvent,
    ConversationTimeout,
    Interrupted,
    TextDelta,
    ToolCall,
    ToolResult,
    TurnEnd,
)
from agentbus_redis.streaming.replies import DEFAULT_MAX_OUTPUT_TOKENS
from tests.integration.cluster import WorkerCluster
from tests.integration.model_side import ModelSide, delta_text, reply_events, request_id_of, streamed, whole

pytestmark = [pytest.mark.integration, pytest.mark.slow]

SERVER_ERROR = 'API Error: 500 {"type":"error","error":{"type":"api_error","message":"Internal server error"}}'


@pytest.fixture(scope="module")
def workers(module_cluster: WorkerCluster) -> WorkerCluster:
    module_cluster.workspace.mkdir(parents=True, exist_ok=True)
    (module_cluster.workspace / "a.txt").write_text("alpha\n")
    (module_cluster.workspace / "b.txt").write_text("beta\n")
    module_cluster.start_all()
    return module_cluster


@contextlib.asynccontextmanager
async def connected(workers: WorkerCluster) -> AsyncIterator[AgentbusClient]:
    async with workers.client() as bus:
        yield bus


def call(tool_id: str, name: str, **tool_input: Any) -> ToolUseBlock:
    return ToolUseBlock(id=tool_id, name=name, input=tool_input)


async def turn(bus: AgentbusClient, session: str, prompt: str, **options: Any) -> list[ConversationEvent]:
    return [event async for event in bus.converse(session, prompt, timeout_s=30, **options)]


def text_of(events: list[ConversationEvent]) -> str:
    return "".join(event.text for event in events if isinstance(event, TextDelta))


async def test_multi_turn_tool_using_turn_with_parallel_calls_streams_text_and_ends_at_end_turn(
    workers: WorkerCluster,
) -> None:
    """R8.5 parallel read-only calls, then a second tool round, then the answer (end_turn): every call has
    its result before the next reply, the text is exactly the blocks' text, the turn ends once."""
    session = "converse-tools"
    first: list[ContentBlock] = [
        TextBlock(text="Reading both."),
        call("toolu_a", "Read", file_path="a.txt"),
        call("toolu_b", "Read", file_path="b.txt"),
    ]
    second: list[ContentBlock] = [
        TextBlock(text=" Now a command."),
        call("toolu_c", "Bash", command="echo gamma", description="Say gamma"),
    ]
    answer: list[ContentBlock] = [TextBlock(text=" a.txt says alpha, b.txt says beta.")]
    async with connected(workers) as bus:
        model = await ModelSide.start(bus, session, [streamed(first), streamed(second), streamed(answer)])
        events = await turn(bus, session, "what do a.txt and b.txt say?")
        await model

        later_model = await ModelSide.start(bus, session, [streamed([TextBlock(text="You're welcome.")])])
        thanks = await turn(bus, session, "thanks")
        await later_model

    assert text_of(events) == "Reading both. Now a command. a.txt says alpha, b.txt says beta."
    calls = {e.tool_use_id: e for e in events if isinstance(e, ToolCall)}
    results = {e.tool_use_id: e for e in events if isinstance(e, ToolResult)}
    assert [(c.name, c.summary) for c in calls.values()] == [
        ("Read", "a.txt"),
        ("Read", "b.txt"),
        ("Bash", "echo gamma"),
    ]
    assert sorted(results) == ["toolu_a", "toolu_b", "toolu_c"]
    assert all(r.ok for r in results.values())
    assert "alpha" in results["toolu_a"].first_line
    assert "beta" in results["toolu_b"].first_line
    assert results["toolu_c"].first_line == "gamma"
    assert results["toolu_c"].name == "Bash"
    positions = {id(e): n for n, e in enumerate(events)}
    for tool_use_id, result in results.items():
        assert positions[id(calls[tool_use_id])] < positions[id(result)]
    end = events[-1]
    assert isinstance(end, TurnEnd)
    assert (end.stop_reason, end.error, end.replies) == ("end_turn", None, 3)
    assert end.usage is not None
    assert end.usage["output_tokens"] == 57
    assert sum(isinstance(e, TurnEnd) for e in events) == 1
    # The next turn on the same session shows only its own events.
    assert text_of(thanks) == "You're welcome."
    assert not any(isinstance(e, ToolCall | ToolResult) for e in thanks)


async def test_r9_3_text_is_yielded_while_the_reply_still_streams(workers: WorkerCluster) -> None:
    """The first delta reaches the watcher before the model has sent the rest of its block."""
    session = "converse-live"
    events = reply_events([TextBlock(text="Hello there, this reply streams in pieces of twenty-four characters.")])
    first_delta = next(n for n, e in enumerate(events) if e["type"] == "content_block_delta")
    request_id = request_id_of(session)
    first_shown = asyncio.Event()

    async def stream_in_two_halves(bus: AgentbusClient, sid: str) -> None:
        for event in events[: first_delta + 1]:
            await bus.send_stream_event(sid, request_id, event)
        await asyncio.wait_for(first_shown.wait(), 20)  # the rest only once the watcher showed the first part
        for event in events[first_delta + 1 :]:
            await bus.send_stream_event(sid, request_id, event)

    async with connected(workers) as bus:
        model = await ModelSide.start(bus, session, [stream_in_two_halves])
        seen: list[ConversationEvent] = []
        async for event in bus.converse(session, "hi", timeout_s=30):
            seen.append(event)
            if isinstance(event, TextDelta):
                first_shown.set()
        await model
    deltas = [e.text for e in seen if isinstance(e, TextDelta)]
    assert deltas[0] == "Hello there, this reply s"[:24]
    assert len(deltas) >= 2
    assert "".join(deltas) == "Hello there, this reply streams in pieces of twenty-four characters."
    assert isinstance(seen[-1], TurnEnd)
    assert seen[-1].stop_reason == "end_turn"


async def test_m7_api_error_message_ends_the_turn_with_its_text(workers: WorkerCluster) -> None:
    session = "converse-api-error"
    error = create_assistant_api_error_message(SERVER_ERROR, error="server_error")
    async with connected(workers) as bus:
        model = await ModelSide.start(bus, session, [whole(error)])
        events = await turn(bus, session, "hello")
        await model
    assert [type(e) for e in events] == [ApiError, TurnEnd]
    assert events[0].text == SERVER_ERROR  # type: ignore[union-attr]
    assert events[1] == TurnEnd(stop_reason="api_error", error=SERVER_ERROR, usage=None, replies=0)


async def test_r9_5_max_tokens_ends_the_turn_with_the_output_limit_error(workers: WorkerCluster) -> None:
    session = "converse-max-tokens"
    async with connected(workers) as bus:
        model = await ModelSide.start(
            bus, session, [streamed([TextBlock(text="It was a dark and")], stop_reason="max_tokens")]
        )
        events = await turn(bus, session, "tell me a story")
        await model
    end = events[-1]
    assert isinstance(end, TurnEnd)
    limit_error = max_output_tokens_error(DEFAULT_MAX_OUTPUT_TOKENS)
    assert (end.stop_reason, end.error) == ("max_tokens", limit_error)
    assert [e.text for e in events if isinstance(e, ApiError)] == [limit_error]
    assert text_of(events) == "It was a dark and"


async def test_m8_5_calls_of_a_cut_off_reply_still_run_before_the_turn_ends(workers: WorkerCluster) -> None:
    """A max_tokens reply with a tool call: its API error does not end the turn while the call waits."""
    session = "converse-cut-off-call"
    cut_off = streamed([call("toolu_cut", "Bash", command="echo cut")], stop_reason="max_tokens")
    async with connected(workers) as bus:
        model = await ModelSide.start(bus, session, [cut_off, whole(create_assistant_message("Done."))])
        events = await turn(bus, session, "run it")
        await model
    kinds = [e.type for e in events]
    assert kinds.index("api_error") < kinds.index("tool_result") < kinds.index("turn_end")
    assert text_of(events) == "Done."
    assert events[-1] == TurnEnd(stop_reason="stop_sequence", usage=events[-1].usage, replies=2)  # type: ignore[union-attr]


async def test_r10_1_interrupt_while_streaming_ends_the_turn_interrupted(workers: WorkerCluster) -> None:
    session = "converse-interrupt"
    events = reply_events([TextBlock(text="This is a long answer that the user will not wait for.")])
    half = next(n for n, e in enumerate(events) if e["type"] == "content_block_delta") + 1
    request_id = request_id_of(session)

    async def half_a_reply(bus: AgentbusClient, sid: str) -> None:
        for event in events[:half]:
            await bus.send_stream_event(sid, request_id, event)

    async with connected(workers) as bus:
        model = await ModelSide.start(bus, session, [half_a_reply])
        seen: list[ConversationEvent] = []
        conversation = bus.converse(session, "explain everything", timeout_s=30)
        async for event in conversation:
            seen.append(event)
            if isinstance(event, TextDelta) and len(seen) == 1:
                await conversation.interrupt()
        await model
    assert seen[0] == TextDelta(text=delta_text(events[half - 1]))
    assert seen[-2:] == [
        Interrupted(text=INTERRUPT_MESSAGE),
        TurnEnd(stop_reason="interrupted", usage=None, replies=0),
    ]


async def test_no_progress_is_a_typed_timeout_naming_what_it_waited_for(workers: WorkerCluster) -> None:
    async with connected(workers) as bus:
        with pytest.raises(ConversationTimeout, match="waiting for the model's reply") as raised:
            await turn_with_timeout(bus, "converse-silent", 0.5)
    assert raised.value.session_id == "converse-silent"


async def turn_with_timeout(bus: AgentbusClient, session: str, timeout_s: float) -> None:
    async for _ in bus.converse(session, "anyone there?", timeout_s=timeout_s):
        pass


async def test_r10_1_interrupt_before_the_model_replies_ends_the_turn_once_ingestion_applied_it(
    workers: WorkerCluster,
) -> None:
    """Nothing streams and no tool runs, but the request is pending (the model is due): as in Claude Code,
    whose model call is under way before anything streams, the interrupt ends the turn with R10.1's text
    (bus/turn_state.py), read as soon as ingestion has applied it, not by the timeout."""
    session = "converse-interrupt-early"
    async with connected(workers) as bus:
        conversation = bus.converse(session, "think hard", timeout_s=60)
        seen: list[ConversationEvent] = []
        prompt_logged = asyncio.ensure_future(anext(aiter(bus.follow(session))))
        iterating = asyncio.ensure_future(_collect(conversation, seen))
        await prompt_logged  # the turn has begun (its prompt is in the log); no model answers it
        await conversation.interrupt()
        await iterating
        history = await bus.history(session)
    assert seen == [Interrupted(text=INTERRUPT_MESSAGE), TurnEnd(stop_reason="interrupted", usage=None, replies=0)]
    said = [
        b.text
        for e in history
        if isinstance(e.message, UserMessage)
        for b in e.message.blocks
        if isinstance(b, TextBlock)
    ]
    assert said == ["think hard", INTERRUPT_MESSAGE]


async def _collect(events: AsyncIterator[ConversationEvent], into: list[ConversationEvent]) -> None:
    async for event in events:
        into.append(event)
