"""The model worker's API key, checked before the worker starts (one line, not a startup traceback)."""

from __future__ import annotations

from agentbus_redis.config.settings import Settings
from agentbus_redis.errors import AgentbusError


class MissingApiKey(AgentbusError):
    """ANTHROPIC_API_KEY is not set for a model worker."""

    def __init__(self) -> None:
        super().__init__(
            "ANTHROPIC_API_KEY is not set: the model worker needs an Anthropic API key (or, for tests and the "
            "demo, any value with AGENTBUS_MODEL__BASE_URL pointing at `agentbus fake-model`)"
        )


def require_api_key(settings: Settings) -> str:
    key = settings.anthropic_api_key
    if key is None or not key.get_secret_value():
        raise MissingApiKey
    return key.get_secret_value()
