"""The model worker's at-most-once rules (workers/model/worker.py): which request an in-flight record answered."""

from __future__ import annotations

from agentbus_redis.model.limits.window import OUTPUT_TOKEN_RECOVERY_MESSAGE
from agentbus_redis.workers.model.worker import answered_already, continues_tool_loop, count_recoveries, request_digest

PROMPT = {"messages": [{"role": "user", "content": "hi"}]}
DIGEST = request_digest(PROMPT)


def test_a_request_answered_at_its_seq_or_later_is_not_called_again() -> None:
    assert answered_already({"seq": 4, "state": "answered", "digest": "x"}, 4, DIGEST)
    assert answered_already({"seq": 5, "state": "interrupted"}, 4, DIGEST)
    assert not answered_already({"seq": 3, "state": "answered", "digest": "x"}, 4, DIGEST)


def test_r6_1_the_same_conversation_republished_after_tombstones_counts_as_answered() -> None:
    # A stream fallback tombstones the partials: the normalizer publishes the prompt-only request again.
    assert answered_already({"seq": 1, "state": "answered", "digest": DIGEST}, 3, request_digest(dict(PROMPT)))


def test_a_call_still_streaming_is_not_an_answer() -> None:
    assert not answered_already({"seq": 4, "state": "streaming", "digest": DIGEST}, 4, DIGEST)
    assert not answered_already(None, 1, DIGEST)


def test_m6_3_a_request_ending_in_tool_results_continues_the_turn() -> None:
    results = {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1", "content": "ok"}]}
    assert continues_tool_loop({"messages": [*PROMPT["messages"], {"role": "assistant", "content": "x"}, results]})
    assert not continues_tool_loop(PROMPT)


def test_m8_5_recoveries_are_counted_back_to_the_turns_prompt() -> None:
    resume = {"role": "user", "content": [{"type": "text", "text": OUTPUT_TOKEN_RECOVERY_MESSAGE}]}
    cut = {"role": "assistant", "content": [{"type": "text", "text": "part"}]}
    older = [{"role": "user", "content": "first"}, cut, resume, cut]
    turn = [{"role": "user", "content": "second"}, cut, resume, cut, resume]
    assert count_recoveries({"messages": [*older, *turn]}) == 2
    assert count_recoveries({"messages": turn[:2]}) == 0
