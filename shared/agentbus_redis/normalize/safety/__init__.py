"""The safety finalizer after normalization: whatever the history held, the request is one the Messages API
accepts (anthropic-api-rules.md): blocks it would refuse, tool ids it would refuse, each repair reported."""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from agentbus_redis.normalize.safety.api_safety import make_api_safe

__all__ = [
    "make_api_safe",
]

_MODULE_OF = {
    "make_api_safe": "api_safety",
}


def __getattr__(name: str) -> Any:
    # The façade imports a module only when one of its names is asked for (import time matters for the CLI).
    module = _MODULE_OF.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(f"{__name__}.{module}"), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(__all__)
