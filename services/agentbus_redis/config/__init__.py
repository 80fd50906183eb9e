"""Configuration, read once per process from the environment, and which build is running."""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from agentbus_redis.config.build_info import UNKNOWN, build_commit, package_version
    from agentbus_redis.config.settings import (
        AgentSettings,
        ConsoleSettings,
        ConsumerSettings,
        LaneSettings,
        MissingInternalKey,
        ModelSettings,
        PricingSettings,
        RateLimitSettings,
        RetentionSettings,
        Settings,
        TenantRateLimit,
        ToolSettings,
    )

__all__ = [
    "UNKNOWN",
    "AgentSettings",
    "ConsoleSettings",
    "ConsumerSettings",
    "LaneSettings",
    "MissingInternalKey",
    "ModelSettings",
    "PricingSettings",
    "RateLimitSettings",
    "RetentionSettings",
    "Settings",
    "TenantRateLimit",
    "ToolSettings",
    "build_commit",
    "package_version",
]

_MODULE_OF = {
    "AgentSettings": "settings",
    "ConsoleSettings": "settings",
    "ConsumerSettings": "settings",
    "LaneSettings": "settings",
    "MissingInternalKey": "settings",
    "ModelSettings": "settings",
    "PricingSettings": "settings",
    "RateLimitSettings": "settings",
    "RetentionSettings": "settings",
    "Settings": "settings",
    "TenantRateLimit": "settings",
    "ToolSettings": "settings",
    "UNKNOWN": "build_info",
    "build_commit": "build_info",
    "package_version": "build_info",
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
