"""bus/conversation.py: the turn's events and when it ends, fed what ingestion's real ledger logs (and the
live deltas it would write) for each scenario — pure, no Redis."""

from __future__ import annotations

import uuid
from collections.abc import Sequence

from agentbus_redis.bus.conversation import (
    ApiError,
    ApiRetry,
    ConversationEvent,
    Interrupted,
    Notice,
    Retracted,
    TextDelta,
    ThinkingDelta,
    ToolCall,
    ToolResult,
    TurnEnd,
    TurnTracker,
    input_summary,
    one_line,
)
from agentbus_redis.bus.events import (
    AssistantReply,
    IngressEnvelope,
    IngressPayload,
    Interrupt,
    LogEntry,
    StreamEvent,
    StreamFallback,
    SystemNotice,
    ToolResultReport,
    UserPrompt,
)
from agentbus_redis.bus.ledger import SessionLedger, new_ledger_state
from agentbus_redis.bus.live_reply import LiveDelta, LiveDeltas
from agentbus_redis.cli.local.demo import stream_events_for
from agentbus_redis.json_types import JsonObject
from agentbus_redis.messages.constants import INTERRUPT_MESSAGE, max_output_tokens_error
from agentbus_redis.messages.content import ContentBlock, TextBlock, ToolResultBlock, ToolUseBlock
from agentbus_redis.messages.factories import (
    create_assistant_api_error_message,
    create_assistant_message,
    create_informational_message,
    create_user_message,
)
from agentbus_redis.messages.system import ApiErrorSystemMessage
from agentbus_redis.streaming.replies import DEFAULT_MAX_OUTPUT_TOKENS

SESSION = "tracked"


class Session:
    """A session's ledger (ingestion's pure rules) and what a watcher reads: log entries and live deltas,
    in the order ``sdk/conversation.py`` merges them."""

    def __init__(self) -> None:
        self.ledger = SessionLedger(new_ledger_state(SESSION))
        self.items: list[LogEntry | LiveDelta] = []

    def apply(self, payload: IngressPayload, *, ingress_id: str | None = None) -> None:
        envelope = IngressEnvelope(session_id=SESSION, idempotency_key=str(uuid.uuid4()), payload=payload)
        out = self.ledger.apply(envelope, now_ms=0, ingress_id=ingress_id)
        assert out.invalid is None, out.invalid
        self.items += out.entries
        if isinstance(payload, StreamEvent):
            live = LiveDeltas()
            live.add(payload.request_id, payload.event, after_seq=self.ledger.state.seq)
            self.items += live.entries()

    def prompt(self, text: str = "go") -> str:
        ingress_id = f"{len(self.items)}-0"
        self.apply(UserPrompt(content=text), ingress_id=ingress_id)
        return ingress_id

    def stream(self, blocks: Sequence[ContentBlock], *, request_id: str, stop_reason: str | None = None) -> None:
        for event in reply_events(blocks, stop_reason=stop_reason):
            self.apply(StreamEvent(request_id=request_id, event=event))

    def answer(self, tool_use_id: str, text: str, *, is_error: bool = False) -> None:
        block = ToolResultBlock(tool_use_id=tool_use_id, content=text, is_error=is_error)
        self.apply(ToolResultReport(message=create_user_message([block])))


def reply_events(blocks: Sequence[ContentBlock], *, stop_reason: str | None = None) -> list[JsonObject]:
    events = stream_events_for(list(blocks), message_id=f"msg_{uuid.uuid4().hex[:8]}", model="claude-test")
    if stop_reason is not None:
        delta = events[-2]["delta"]
        assert isinstance(delta, dict)
        delta["stop_reason"] = stop_reason
    return events


def track(items: Sequence[LogEntry | LiveDelta], prompt_id: str) -> tuple[TurnTracker, list[ConversationEvent]]:
    tracker = TurnTracker(prompt_id)
    events: list[ConversationEvent] = []
    for item in items:
        events += tracker.on_live(item) if isinstance(item, LiveDelta) else tracker.on_log(item)
    if tracker.end is not None:
        events.append(tracker.end)
    return tracker, events


def text_of(events: Sequence[ConversationEvent]) -> str:
    return "".join(e.text for e in events if isinstance(e, TextDelta))


LONG = "A reply long enough to be streamed in several text deltas of twenty-four characters."


def test_r9_3_streamed_text_is_yielded_delta_by_delta_and_the_turn_ends_at_end_turn() -> None:
    session = Session()
    session.stream([TextBlock(text="an earlier turn")], request_id="req_0")
    prompt = session.prompt()
    session.stream([TextBlock(text=LONG)], request_id="req_1")
    _, events = track(session.items, prompt)
    deltas = [e for e in events if isinstance(e, TextDelta)]
    assert len(deltas) == 4
    assert text_of(events) == LONG  # nothing of the earlier turn
    end = events[-1]
    assert isinstance(end, TurnEnd)
    assert (end.stop_reason, end.error, end.replies) == ("end_turn", None, 1)
    assert end.usage is not None
    assert (end.usage["input_tokens"], end.usage["output_tokens"]) == (42, 57)


def test_missed_deltas_come_with_the_logged_block_and_late_ones_are_dropped() -> None:
    session = Session()
    prompt = session.prompt()
    session.stream([TextBlock(text=LONG), TextBlock(text="Second block.")], request_id="req_1")
    live = [item for item in session.items if isinstance(item, LiveDelta)]
    logged = [item for item in session.items if isinstance(item, LogEntry)]
    # The watcher missed the first two deltas (the trimmed live stream) and read the rest after the log.
    _, events = track([*logged, *live[2:]], prompt)
    assert text_of(events) == LONG + "Second block."
    _, events = track([logged[0], live[0], *logged[1:], *live[1:]], prompt)
    assert text_of(events) == LONG + "Second block."


def test_thinking_streams_as_thinking_deltas() -> None:
    session = Session()
    prompt = session.prompt()
    request_id = "req_think"
    events = [
        {
            "type": "message_start",
            "message": {
                "id": "m",
                "type": "message",
                "role": "assistant",
                "model": "x",
                "content": [],
                "usage": {"input_tokens": 1, "output_tokens": 1},
            },
        },
        {"type": "content_block_start", "index": 0, "content_block": {"type": "thinking", "thinking": ""}},
        {"type": "content_block_delta", "index": 0, "delta": {"type": "thinking_delta", "thinking": "Hmm, "}},
        {"type": "content_block_delta", "index": 0, "delta": {"type": "thinking_delta", "thinking": "let me see."}},
        {"type": "content_block_delta", "index": 0, "delta": {"type": "signature_delta", "signature": "sig"}},
        {"type": "content_block_stop", "index": 0},
        {"type": "content_block_start", "index": 1, "content_block": {"type": "text", "text": ""}},
        {"type": "content_block_delta", "index": 1, "delta": {"type": "text_delta", "text": "Yes."}},
        {"type": "content_block_stop", "index": 1},
        {"type": "message_delta", "delta": {"stop_reason": "end_turn"}, "usage": {"output_tokens": 9}},
        {"type": "message_stop"},
    ]
    for event in events:
        session.apply(StreamEvent(request_id=request_id, event=event))
    _, seen = track(session.items, prompt)
    assert [e.text for e in seen if isinstance(e, ThinkingDelta)] == ["Hmm, ", "let me see."]
    assert text_of(seen) == "Yes."


def test_r8_1_the_turn_never_ends_while_a_call_waits_for_its_result() -> None:
    session = Session()
    prompt = session.prompt()
    calls = [
        ToolUseBlock(id="toolu_1", name="Read", input={"file_path": "a.txt"}),
        ToolUseBlock(id="toolu_2", name="Bash", input={"command": "false", "description": "fail"}),
    ]
    session.stream([TextBlock(text="Looking."), *calls], request_id="req_1")
    tracker, events = track(session.items, prompt)
    assert tracker.end is None
    assert tracker.pending == {"toolu_1": "Read", "toolu_2": "Bash"}
    assert [(e.name, e.summary) for e in events if isinstance(e, ToolCall)] == [("Read", "a.txt"), ("Bash", "false")]
    session.answer("toolu_1", "     1\talpha\n     2\tbeta")
    tracker, _ = track(session.items, prompt)
    assert tracker.end is None
    session.answer("toolu_2", "Exit code 1", is_error=True)
    session.stream([TextBlock(text="Done.")], request_id="req_2")
    _, events = track(session.items, prompt)
    results = [(e.tool_use_id, e.name, e.ok, e.first_line) for e in events if isinstance(e, ToolResult)]
    assert results == [("toolu_1", "Read", True, "1\talpha"), ("toolu_2", "Bash", False, "Exit code 1")]
    assert events[-1] == TurnEnd(stop_reason="end_turn", usage=events[-1].usage, replies=2)  # type: ignore[union-attr]


def test_r9_5_a_streamed_max_tokens_reply_ends_at_its_api_error_logged_at_message_stop() -> None:
    session = Session()
    prompt = session.prompt()
    reply = reply_events([TextBlock(text="It was a dark")], stop_reason="max_tokens")
    for event in reply[:-1]:  # up to message_delta: the block is logged with stop_reason max_tokens
        session.apply(StreamEvent(request_id="req_1", event=event))
    tracker, _ = track(session.items, prompt)
    assert tracker.end is None  # its API error is still to come
    session.apply(StreamEvent(request_id="req_1", event=reply[-1]))
    _, events = track(session.items, prompt)
    error = max_output_tokens_error(DEFAULT_MAX_OUTPUT_TOKENS)
    assert events[-2:] == [
        ApiError(text=error, error="max_output_tokens"),
        TurnEnd(stop_reason="max_tokens", error=error, usage=events[-1].usage, replies=1),  # type: ignore[union-attr]
    ]


def test_m7_4_an_api_error_message_ends_the_turn() -> None:
    session = Session()
    prompt = session.prompt()
    session.apply(
        AssistantReply(message=create_assistant_api_error_message("API Error: Request timed out", error="unknown"))
    )
    _, events = track(session.items, prompt)
    assert events == [
        ApiError(text="API Error: Request timed out", error="unknown"),
        TurnEnd(stop_reason="api_error", error="API Error: Request timed out", replies=0),
    ]


def test_a_whole_reply_ends_the_turn_by_its_own_stop_reason() -> None:
    session = Session()
    prompt = session.prompt()
    session.apply(AssistantReply(message=create_assistant_message("All done.")))
    _, events = track(session.items, prompt)
    assert text_of(events) == "All done."
    assert isinstance(events[-1], TurnEnd)
    assert events[-1].stop_reason == "stop_sequence"


def test_r10_1_interrupt_while_streaming_ends_the_turn_interrupted() -> None:
    session = Session()
    prompt = session.prompt()
    reply = reply_events([TextBlock(text=LONG), ToolUseBlock(id="toolu_x", name="Read", input={"file_path": "x"})])
    for event in reply[:-3]:
        session.apply(StreamEvent(request_id="req_1", event=event))
    session.apply(Interrupt())
    _, events = track(session.items, prompt)
    assert events[-2:] == [Interrupted(text=INTERRUPT_MESSAGE), TurnEnd(stop_reason="interrupted", replies=0)]


def test_r6_1_a_fallback_retracts_the_partial_reply_and_its_calls_never_wait() -> None:
    session = Session()
    prompt = session.prompt()
    reply = reply_events(
        [TextBlock(text="Let me"), ToolUseBlock(id="toolu_ghost", name="Bash", input={"command": "x"})]
    )
    for event in reply[:-2]:
        session.apply(StreamEvent(request_id="req_1", event=event))
    session.apply(StreamFallback(request_id="req_1"))
    session.stream([TextBlock(text="Let me answer directly.")], request_id="req_1")  # the retry, same request id
    tracker, events = track(session.items, prompt)
    assert any(isinstance(e, Retracted) for e in events)
    assert text_of(events) == "Let me" + "Let me answer directly."
    assert tracker.pending == {}
    assert isinstance(events[-1], TurnEnd)


def test_summaries_are_one_short_line() -> None:
    assert input_summary({"file_path": "README.md", "limit": 3}) == "README.md"
    assert input_summary({"command": "ls -la\necho more", "description": "List"}) == "ls -la"
    assert input_summary({"unknown": 1, "other": "value"}) == "value"
    assert input_summary("not an object") == ""
    assert one_line("\n\n" + "x" * 200) == "x" * 79 + "…"


def test_m4_4_retry_notices_and_informational_messages_become_one_line_events() -> None:
    session = Session()
    prompt = session.prompt()
    retry = ApiErrorSystemMessage(
        subtype="api_error",
        level="error",
        error={"status": 529, "message": "Overloaded\nmore"},
        retry_in_ms=1200.0,
        retry_attempt=1,
        max_retries=10,
        uuid="u-retry",
        timestamp="2026-01-01T00:00:00.000Z",
    )
    session.apply(SystemNotice(message=retry))
    session.apply(SystemNotice(message=create_informational_message("Switched to claude-haiku-4-5", level="warning")))
    _, events = track(session.items, prompt)
    assert events == [
        ApiRetry(text="API error 529: Overloaded", retry_in_ms=1200.0, attempt=1, max_retries=10),
        Notice(text="Switched to claude-haiku-4-5", level="warning"),
    ]
