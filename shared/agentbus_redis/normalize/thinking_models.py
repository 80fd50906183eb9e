"""Which models signed the thinking the open turn of a request replays (anthropic-api-rules.md §1.10,
agent-loop.md M6.3 step 4 / M6.6).

A thinking signature is bound to the model that made it. The normalizer keeps the open turn's signed
thinking for the model worker (``NormalizeOptions.thinking_enabled=None``) but does not know which model
the worker will call — the session's, the worker's default, or the fallback model a turn switched to.
So it reports the models whose thinking the open turn holds, and the worker strips that thinking when
the model it calls is another one (``build_model_params``); the tool loop then goes on without thinking.
"""

from __future__ import annotations

from collections.abc import Sequence

from agentbus_redis.messages.constants import SYNTHETIC_MODEL
from agentbus_redis.messages.content import is_thinking
from agentbus_redis.messages.kinds import AssistantMessage, Message, TombstoneMessage
from agentbus_redis.normalize.incremental import is_human_prompt
from agentbus_redis.wire import field_or_none


def open_turn_thinking_models(history: Sequence[Message]) -> list[str]:
    """The distinct models (first seen from the end) of the live assistant messages after the last human
    prompt that carry a thinking or redacted_thinking block. The history's turn reaches back at least as
    far as the request's open turn (a meta user message never starts one here), so nothing the request's
    open turn replays is left out. Scans from the end: O(length of the turn)."""
    models: list[str] = []
    retracted: set[str] = set()
    for message in reversed(history):
        if is_human_prompt(message):
            break
        if isinstance(message, TombstoneMessage):
            uuid = field_or_none(message.message, "uuid")
            if isinstance(uuid, str):
                retracted.add(uuid)
        elif isinstance(message, AssistantMessage) and message.uuid not in retracted:
            model = message.message.model
            if model and model != SYNTHETIC_MODEL and model not in models and any(map(is_thinking, message.blocks)):
                models.append(model)
    return models
