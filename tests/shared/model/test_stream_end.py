"""How the worker closes a reply complete by M2.5 but cut before ``message_stop`` (model/stream_end.py)."""

from __future__ import annotations

import pytest

from agentbus_redis.model.stream_end import closing_events, loop_stop_reason
from agentbus_redis.streaming.accumulate import StreamAccumulator


def test_r10_6_the_loop_goes_on_only_from_a_finished_tool_use() -> None:
    """claude-code-messages.md R10.6: "Loop continues only if any tool_use block was streamed (stop_reason is
    not trusted)"."""
    assert loop_stop_reason(finished_tool_use=True) == "tool_use"
    assert loop_stop_reason(finished_tool_use=False) == "end_turn"


def test_a_reply_with_its_stop_reason_only_gets_the_stop() -> None:
    assert closing_events(stop_reason="end_turn", finished_tool_use=False) == [{"type": "message_stop"}]


@pytest.mark.parametrize(("tool_use", "expected"), [(False, "end_turn"), (True, "tool_use")])
def test_a_cut_before_the_stop_reason_closes_the_last_finished_block(tool_use: bool, expected: str) -> None:
    """M2.5: a finished block makes the stream a reply; the closing events put the loop's stop reason on its
    last block message (R9.5) and keep the stream's usage (M2.6: no usage fields, nothing overwritten)."""
    accumulator = StreamAccumulator(max_output_tokens=32_000, request_id="req_1", stream_events=False)
    start = {"type": "message", "id": "msg_1", "role": "assistant", "model": "m", "content": []}
    accumulator.feed({"type": "message_start", "message": {**start, "usage": {"input_tokens": 7, "output_tokens": 3}}})
    accumulator.feed({"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}})
    accumulator.feed({"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "ok"}})
    accumulator.feed({"type": "content_block_stop", "index": 0})
    outputs = []
    for event in closing_events(stop_reason=None, finished_tool_use=tool_use):
        outputs += accumulator.feed(event)
    assert accumulator.stop_reason == expected
    assert accumulator.usage["input_tokens"] == 7
    assert accumulator.usage["output_tokens"] == 3
    assert not accumulator.is_incomplete()
    assert len(outputs) == 1  # the last block's message, updated in place (R9.5); no error message
