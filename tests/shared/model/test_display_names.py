"""M6.3 step 5: the model-switch warning names the models by their display names."""

from __future__ import annotations

import pytest

from agentbus_redis.model.display_names import model_display_name
from agentbus_redis.model.error_texts import switched_model_notice


@pytest.mark.parametrize(
    ("model", "name"),
    [
        ("claude-opus-4-6", "Opus 4.6"),
        ("claude-sonnet-4-5-20250929", "Sonnet 4.5"),
        ("claude-haiku-4-5", "Haiku 4.5"),
        ("claude-opus-4-1", "Opus 4.1"),
        ("claude-opus-4-20250514", "Opus 4"),
        ("claude-sonnet-4-20250514", "Sonnet 4"),
        ("claude-3-7-sonnet-20250219", "Sonnet 3.7"),
        ("claude-3-5-haiku-20241022", "Haiku 3.5"),
        ("claude-3-opus-20240229", "Opus 3"),
        ("claude-opus-4-8", "Opus 4.8"),
        ("claude-sonnet-4-6[1m]", "Sonnet 4.6 (1M context)"),
        ("Claude-Opus-4-6", "Opus 4.6"),
        ("my-custom-model", "my-custom-model"),
        ("claude-opus-4-6-v1:0", "claude-opus-4-6-v1:0"),
    ],
)
def test_model_display_name(model: str, name: str) -> None:
    assert model_display_name(model) == name


def test_m6_3_switch_warning_uses_display_names() -> None:
    assert (
        switched_model_notice("claude-sonnet-4-5", "claude-opus-4-6")
        == "Switched to Sonnet 4.5 due to high demand for Opus 4.6"
    )
