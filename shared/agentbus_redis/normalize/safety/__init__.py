"""The safety finalizer after normalization: whatever the history held, the request is one the Messages API
accepts (anthropic-api-rules.md): blocks it would refuse, tool ids it would refuse, each repair reported."""

from __future__ import annotations

from typing import TYPE_CHECKING

from agentbus_redis.lazy_facade import lazy_facade

if TYPE_CHECKING:
    from agentbus_redis.normalize.safety.api_safety import make_api_safe

__all__ = [
    "make_api_safe",
]

_MODULE_OF = {
    "make_api_safe": "api_safety",
}


__getattr__, __dir__ = lazy_facade(globals(), _MODULE_OF)
