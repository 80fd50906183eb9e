"""Configuration, read once per process from the environment, and which build is running."""

from __future__ import annotations

from typing import TYPE_CHECKING

from agentbus_redis.lazy_facade import lazy_facade

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


__getattr__, __dir__ = lazy_facade(globals(), _MODULE_OF)
