"""M8.1: the rough token count the pre-flight blocking limit compares (Claude Code's chars / 4 rules)."""

from __future__ import annotations

from agentbus_redis.model.limits.token_estimate import MEDIA_TOKENS, estimate_prompt_tokens, rough_tokens
from agentbus_redis.model.limits.window import blocking_limit, is_blocked, lowered_window


def test_rough_tokens_rounds_like_math_round() -> None:
    assert [rough_tokens("x" * n) for n in (0, 1, 2, 5, 6, 8)] == [0, 0, 1, 1, 2, 2]


def test_m8_1_estimate_counts_every_kind_of_block_system_and_tools() -> None:
    body = {
        "system": [{"type": "text", "text": "s" * 40}],
        "messages": [
            {"role": "user", "content": "u" * 400},
            {
                "role": "assistant",
                "content": [
                    {"type": "thinking", "thinking": "t" * 80, "signature": "sig"},
                    {"type": "tool_use", "id": "toolu_1", "name": "Read", "input": {"file_path": "a"}},
                ],
            },
            {
                "role": "user",
                "content": [
                    {"type": "tool_result", "tool_use_id": "toolu_1", "content": [{"type": "text", "text": "r" * 40}]},
                    {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "x" * 99999}},
                ],
            },
        ],
        "tools": [{"name": "Read", "description": "d", "input_schema": {"type": "object"}}],
    }
    tool_use = rough_tokens('Read{"file_path":"a"}')
    tools = rough_tokens('[{"name":"Read","description":"d","input_schema":{"type":"object"}}]')
    assert estimate_prompt_tokens(body) == 10 + 100 + 20 + tool_use + 10 + MEDIA_TOKENS + tools


def test_m8_1_blocking_limit_example_and_override() -> None:
    assert blocking_limit(200_000, 32_000) == 177_000  # M8.1's example
    assert is_blocked(177_000, window=200_000, model_max_tokens=32_000)
    assert not is_blocked(176_999, window=200_000, model_max_tokens=32_000)
    assert is_blocked(500, window=200_000, model_max_tokens=32_000, override=500)
    assert lowered_window(200_000, 100_000) == 100_000
    assert lowered_window(200_000, 300_000) == 200_000
    assert lowered_window(200_000, None) == 200_000
