"""A1.1 / A9 the Agent tool's result size limit (100 000 characters): a longer final text is cut, and the
cut says the original size (the spec gives no persisted-output format to use instead)."""

from __future__ import annotations

from agentbus_redis.agents.results import ChildFacts, completed_result, cut_note
from agentbus_redis.agents.tool import AGENT_RESULT_SIZE_LIMIT
from agentbus_redis.messages.content import TextBlock
from agentbus_redis.messages.factories import create_assistant_message, create_user_message

FACTS = ChildFacts(
    agent_id="a0123456789abcdef", agent_type="general-purpose", prompt="p", description="d", started_ms=0
)


def test_a1_1_a_result_over_100000_characters_is_cut_and_says_its_original_size() -> None:
    long_text = "x" * 150_000
    result = completed_result(FACTS, [create_user_message("p"), create_assistant_message(long_text)], now_ms=10)
    assert isinstance(result.content, list)
    first = result.content[0]
    assert isinstance(first, TextBlock)
    assert first.text == "x" * AGENT_RESULT_SIZE_LIMIT + "\n\n" + cut_note(150_000, AGENT_RESULT_SIZE_LIMIT)
    assert (
        cut_note(150_000, AGENT_RESULT_SIZE_LIMIT) == "[agentbus: output cut: 150000 characters, the first 100000 kept]"
    )
    assert result.content[1].type == "text"  # the agentId / usage trailer stays whole (A5.2)
    assert "agentId: a0123456789abcdef" in getattr(result.content[1], "text", "")


def test_a1_1_a_result_within_the_limit_is_whole() -> None:
    text = "y" * AGENT_RESULT_SIZE_LIMIT
    result = completed_result(FACTS, [create_user_message("p"), create_assistant_message(text)], now_ms=10)
    assert isinstance(result.content, list)
    assert result.content[0] == TextBlock(type="text", text=text)


def test_a1_1_several_text_blocks_are_cut_across_blocks() -> None:
    reply = create_assistant_message([TextBlock(text="a" * 60_000), TextBlock(text="b" * 60_000)])
    result = completed_result(FACTS, [create_user_message("p"), reply], now_ms=10)
    assert isinstance(result.content, list)
    texts = [block.text for block in result.content[:2] if isinstance(block, TextBlock)]
    assert texts[0] == "a" * 60_000
    assert texts[1].startswith("b" * 40_000 + "\n\n[agentbus: output cut: 120000 characters")
