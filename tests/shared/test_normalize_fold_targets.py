"""R4.7 step 2: the fold's merge targets give exactly what the walk back over the result gives.

``append_assistant`` used to walk back over every tool-result user message and assistant of the turn
for each assistant message (quadratic in tool-heavy turns); ``MergeTargets`` keeps the answer as the
fold goes. These tests fold random conversations both ways and compare the results.
"""

from __future__ import annotations

import random
from collections.abc import Sequence

from agentbus_redis.messages.kinds import ApiMessage, AssistantMessage, UserMessage
from agentbus_redis.normalize import NormalizeOptions
from agentbus_redis.normalize.passes.content_ops import is_tool_result_message
from agentbus_redis.normalize.passes.fold import _append_user, fold_messages, fold_user
from agentbus_redis.normalize.passes.merge import merge_assistant_messages
from agentbus_redis.normalize.passes.tool_blocks import normalize_tool_uses
from tests.shared.normalize_builders import assistant, shape, text, tool_result, tool_use, user, wire

OPTIONS = NormalizeOptions()


def _walk_back_append(result: list[ApiMessage], message: AssistantMessage) -> None:
    """The R4.7 step 2 walk as written in Claude Code (the reference)."""
    message_id = message.message.id
    for index in range(len(result) - 1, -1, -1):
        candidate = result[index]
        if isinstance(candidate, AssistantMessage):
            if message_id is not None and candidate.message.id == message_id:
                result[index] = merge_assistant_messages(candidate, message)
                return
            continue
        if not is_tool_result_message(candidate):
            break
    result.append(message)


def _reference_fold(messages: Sequence[UserMessage | AssistantMessage]) -> list[ApiMessage]:
    result: list[ApiMessage] = []
    for message in messages:
        if isinstance(message, UserMessage):
            folded, _ = fold_user(message, OPTIONS, {})
            if folded is not None:
                _append_user(result, folded, OPTIONS)
        else:
            normalized, _ = normalize_tool_uses(message, OPTIONS)
            _walk_back_append(result, normalized)
    return result


def _random_conversation(rng: random.Random, length: int) -> list[UserMessage | AssistantMessage]:
    messages: list[UserMessage | AssistantMessage] = []
    calls = 0
    for _ in range(length):
        kind = rng.choice(["prompt", "result", "result", "mixed", "assistant", "assistant", "assistant"])
        if kind == "prompt":
            messages.append(user(f"prompt {len(messages)}"))
        elif kind == "result":
            messages.append(user([tool_result(f"toolu_{rng.randrange(max(calls, 1)):04d}", "ok")]))
        elif kind == "mixed":
            messages.append(user([tool_result(f"toolu_{rng.randrange(max(calls, 1)):04d}", "ok"), text("and")]))
        else:
            msg_id = rng.choice(["msg_a", "msg_b", "msg_c", None])
            block = tool_use(f"toolu_{calls:04d}") if rng.random() < 0.5 else text(f"t{len(messages)}")
            calls += 1
            made = assistant(block, msg_id=msg_id) if msg_id is not None else assistant(block)
            if msg_id is None:
                made = made.model_copy(update={"message": made.message.model_copy(update={"id": None})})
            messages.append(made)
    return messages


def test_r4_7_merge_targets_match_the_walk_back_on_random_conversations() -> None:
    """R4.7: same merges (same ids, same order of blocks), same user merges, for 400 random folds."""
    rng = random.Random(4711)
    for _ in range(400):
        conversation = _random_conversation(rng, rng.randrange(1, 40))
        expected = _reference_fold(conversation)
        actual, _ = fold_messages(conversation, OPTIONS, {})
        assert shape(actual) == shape(expected)
        assert [wire(message) for message in actual] == [wire(message) for message in expected]


def test_r4_7_prompt_turned_tool_result_by_a_merge_reopens_the_walk() -> None:
    """R4.7/R4.10: a prompt merged with a following tool result is no longer a stopper, so a later
    assistant of an id seen before the prompt merges across it (as the walk back would)."""
    conversation: list[UserMessage | AssistantMessage] = [
        assistant(tool_use("toolu_0001"), msg_id="msg_a"),
        user("a prompt"),
        user([tool_result("toolu_0001", "ok")]),
        assistant(text("more"), msg_id="msg_a"),
    ]
    actual, _ = fold_messages(conversation, OPTIONS, {})
    assert shape(actual) == shape(_reference_fold(conversation))
    assert shape(actual) == ["A[tool_use,text]", "U[tool_result,text]"]
