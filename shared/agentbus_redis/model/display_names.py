"""Display names of models (``Opus 4.6``, ``Sonnet 4.5``), as Claude Code renders them in user-facing texts
such as M6.3's ``Switched to <fallback display name> due to high demand for <original display name>``.

Derived from the canonical id rather than listed, so newer ids of the same shape get their name too:
``claude-<family>-<major>[-<minor>]`` (``claude-opus-4-6`` → ``Opus 4.6``, ``claude-opus-4-20250514`` →
``Opus 4``) and the older ``claude-<major>-<minor>-<family>`` (``claude-3-7-sonnet`` → ``Sonnet 3.7``); a
dated snapshot suffix is ignored and a ``[1m]`` id adds `` (1M context)``. Any other id (a custom or
provider-specific one) is shown as it is, as Claude Code shows a model it has no name for.
"""

from __future__ import annotations

import re
from typing import Final

from agentbus_redis.model.limits.max_tokens import undated_model_id

FAMILIES: Final = ("opus", "sonnet", "haiku", "fable", "mythos")
_FAMILY = "|".join(FAMILIES)
_NEW_STYLE = re.compile(rf"claude-({_FAMILY})-(\d+)(?:-(\d))?")
_OLD_STYLE = re.compile(rf"claude-(\d+)(?:-(\d))?-({_FAMILY})")
_ONE_MILLION = "[1m]"


def model_display_name(model: str) -> str:
    """The display name of ``model`` (see the module docstring); the id itself when it has none."""
    one_million = _ONE_MILLION in model.lower()
    name = undated_model_id(model.lower().replace(_ONE_MILLION, ""))
    if found := _NEW_STYLE.fullmatch(name):
        family, major, minor = found.groups()
    elif found := _OLD_STYLE.fullmatch(name):
        major, minor, family = found.groups()
    else:
        return model
    version = f"{major}.{minor}" if minor is not None else major
    return f"{family.capitalize()} {version}" + (" (1M context)" if one_million else "")


__all__ = ["FAMILIES", "model_display_name"]
