"""M8.3–M8.5: the ``max_output_tokens`` error a cut reply's stop reason brings (R9.5) is withheld when the model
worker says it recovers (``StreamEvent.withhold_stop_error``), and logged when it does not."""

from __future__ import annotations

import pytest

from agentbus_redis.clock import FixedClock
from agentbus_redis.ids import SequentialIds
from agentbus_redis.json_types import JsonObject
from agentbus_redis.messages.constants import max_output_tokens_error
from agentbus_redis.messages.kinds import AssistantMessage
from agentbus_redis.streaming.replies import OpenReply

CUT_REPLY: list[JsonObject] = [
    {
        "type": "message_start",
        "message": {
            "id": "msg_cut",
            "type": "message",
            "role": "assistant",
            "model": "claude-sonnet-4-6",
            "content": [],
            "stop_reason": None,
            "usage": {"input_tokens": 10, "output_tokens": 1},
        },
    },
    {"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}},
    {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "The first half"}},
    {"type": "content_block_stop", "index": 0},
    {"type": "message_delta", "delta": {"stop_reason": "max_tokens"}, "usage": {"output_tokens": 100}},
    {"type": "message_stop"},
]


def logged(*, withhold: bool) -> list[AssistantMessage]:
    reply = OpenReply(request_id="req_cut", max_output_tokens=100)
    messages: list[AssistantMessage] = []
    for event in CUT_REPLY:
        progress = reply.feed(
            event,
            clock=FixedClock(),
            ids=SequentialIds(),
            withhold_stop_error=withhold and event["type"] == "message_delta",
        )
        messages.extend(progress.completed)
    return messages


@pytest.mark.parametrize("withhold", [False, True])
def test_m8_3_cut_reply_error_is_withheld_only_when_the_worker_recovers(withhold: bool) -> None:
    messages = logged(withhold=withhold)
    texts = ["".join(getattr(b, "text", "") for b in m.blocks) for m in messages]
    assert texts[0] == "The first half"
    assert messages[0].message.stop_reason == "max_tokens"  # the cut reply itself is kept either way
    if withhold:
        assert texts == ["The first half"]
    else:
        assert texts == ["The first half", max_output_tokens_error(100)]
        assert messages[1].api_error == "max_output_tokens"
