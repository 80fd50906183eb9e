"""Routing a pi wire object to its model inside a discriminated union, with a catch-all for the rest.

pi's unions (blocks on ``type``, messages on ``role``, entries on ``type``) each keep what they cannot
model — an unknown kind, or a known kind missing a required field — verbatim in a fallback model, so a
newer pi's files survive a round trip (P1.6). This is the one place that decides which.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from agentbus_redis.wire import CamelModel

FieldCheck = Callable[[Any], bool]
"""Whether a present field's value is acceptable for its model."""


def present(_value: Any) -> bool:
    return True


def is_string(value: Any) -> bool:
    return isinstance(value, str)


def is_object(value: Any) -> bool:
    return isinstance(value, dict)


def tag_router(
    key: str, required: Mapping[str, Mapping[str, FieldCheck]], fallback: str, fallback_model: type[CamelModel]
) -> Callable[[Any], str]:
    """A ``Discriminator`` callable: the tag is the value of ``key`` when its kind is in ``required`` and
    every required field is there and passes its check, else ``fallback``."""

    def route(value: Any) -> str:
        if isinstance(value, CamelModel):
            return fallback if isinstance(value, fallback_model) else str(getattr(value, key, fallback))
        if not isinstance(value, dict):
            return fallback
        kind = value.get(key)
        fields = required.get(kind) if isinstance(kind, str) else None
        if fields is None or any(name not in value or not check(value[name]) for name, check in fields.items()):
            return fallback
        return str(kind)

    return route
