"""``max_tokens`` per model (agent-loop.md M1.5): the default a request sends and the upper limit an
override may reach, as data.

Lookup order for one model id (compared lowercase):

1. ``exact`` — entries keyed by exact model id (M1.5 [REC]), tried for the id as given and then without
   a dated snapshot suffix (``-20250929``, ``@20250929``): either a full :class:`MaxTokensLimits` row, or
   a capability (the model's max output tokens) that, when ≥ 4 096, replaces the upper limit and clamps
   the default (smaller capabilities are ignored, as in Claude Code);
2. ``families`` — Claude Code's substring rows, first match wins (so ``claude-opus-4-7``, newer than the
   snapshot, falls into ``opus-4`` → 32 000 / 32 000, M1.5 [OBS]);
3. ``fallback`` — anything else: 32 000 / 64 000.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

CAPPED_DEFAULT_MAX_TOKENS = 8_000
"""M1.5 (gated ``tengu_otk_slot_v1``): the default is first capped at this value."""
ESCALATED_MAX_TOKENS = 64_000
"""M1.5/M8.5: the one escalation after a truncated reply under the capped default."""
MIN_CAPABILITY_MAX_TOKENS = 4_096
"""M1.5: a capability-table entry below this is not trusted."""
_DATE_SUFFIX = re.compile(r"[-@]\d{8}$")


def undated_model_id(model: str) -> str:
    """The model id, lowercase, without a dated snapshot suffix (``-20250929``, Vertex ``@20250929``)."""
    return _DATE_SUFFIX.sub("", model.strip().lower())


@dataclass(frozen=True, slots=True)
class MaxTokensLimits:
    """The default ``max_tokens`` of a model and the most an override may ask for (M1.5)."""

    default: int
    upper: int


@dataclass(frozen=True, slots=True)
class FamilyRow:
    """One row of M1.5's table: the model matches when any substring occurs in its id."""

    substrings: tuple[str, ...]
    limits: MaxTokensLimits


DEFAULT_FAMILY_ROWS: tuple[FamilyRow, ...] = (
    FamilyRow(("opus-4-6",), MaxTokensLimits(64_000, 128_000)),
    FamilyRow(("sonnet-4-6",), MaxTokensLimits(32_000, 128_000)),
    FamilyRow(("opus-4-5", "sonnet-4", "haiku-4"), MaxTokensLimits(32_000, 64_000)),
    FamilyRow(("opus-4-1", "opus-4"), MaxTokensLimits(32_000, 32_000)),
    FamilyRow(("claude-3-opus",), MaxTokensLimits(4_096, 4_096)),
    FamilyRow(("claude-3-sonnet",), MaxTokensLimits(8_192, 8_192)),
    FamilyRow(("claude-3-haiku",), MaxTokensLimits(4_096, 4_096)),
    FamilyRow(("3-5-sonnet", "3-5-haiku"), MaxTokensLimits(8_192, 8_192)),
    FamilyRow(("3-7-sonnet",), MaxTokensLimits(32_000, 64_000)),
)
"""M1.5's table in Claude Code's order (v2.1.88)."""

DEFAULT_FALLBACK_LIMITS = MaxTokensLimits(32_000, 64_000)
"""M1.5: "anything else"."""


@dataclass(frozen=True, slots=True)
class MaxTokensTable:
    """M1.5 as configuration: exact-id capability entries, substring rows, a fallback."""

    exact: Mapping[str, int | MaxTokensLimits] = field(default_factory=lambda: MappingProxyType({}))
    """Exact model id → its limits, or its documented max output tokens (a capability)."""
    families: tuple[FamilyRow, ...] = DEFAULT_FAMILY_ROWS
    fallback: MaxTokensLimits = DEFAULT_FALLBACK_LIMITS

    def __post_init__(self) -> None:
        # Ids are compared lowercase; a read-only copy keeps the frozen table from changing under us.
        object.__setattr__(self, "exact", MappingProxyType({key.lower(): value for key, value in self.exact.items()}))

    def limits(self, model: str) -> MaxTokensLimits:
        """M1.5: the default and upper ``max_tokens`` of ``model``."""
        name = model.lower()
        limits = self.family_limits(name)
        entry = self.exact.get(name, self.exact.get(undated_model_id(name)))
        if isinstance(entry, MaxTokensLimits):
            return entry
        if entry is not None and entry >= MIN_CAPABILITY_MAX_TOKENS:
            return MaxTokensLimits(default=min(limits.default, entry), upper=entry)
        return limits

    def family_limits(self, model: str) -> MaxTokensLimits:
        """The first substring row ``model`` matches (M1.5 "first match wins"), else the fallback."""
        name = model.lower()
        for row in self.families:
            if any(substring in name for substring in row.substrings):
                return row.limits
        return self.fallback


DEFAULT_MAX_TOKENS_TABLE = MaxTokensTable()


def default_max_tokens(
    model: str, *, table: MaxTokensTable = DEFAULT_MAX_TOKENS_TABLE, capped_default: bool = False
) -> int:
    """M1.5: the ``max_tokens`` a request to ``model`` sends without an override; with the
    ``tengu_otk_slot_v1`` behaviour (``capped_default``) first capped at 8 000."""
    default = table.limits(model).default
    return min(default, CAPPED_DEFAULT_MAX_TOKENS) if capped_default else default


def max_tokens_upper_limit(model: str, *, table: MaxTokensTable = DEFAULT_MAX_TOKENS_TABLE) -> int:
    """M1.5: the most ``max_tokens`` an override may set for ``model``."""
    return table.limits(model).upper


def resolve_max_tokens(
    model: str,
    override: int | None = None,
    *,
    table: MaxTokensTable = DEFAULT_MAX_TOKENS_TABLE,
    capped_default: bool = False,
) -> int:
    """M1.5: the model default, or an override (``CLAUDE_CODE_MAX_OUTPUT_TOKENS`` in Claude Code; for
    us the session's or the worker's ``max_tokens``) bounded by the upper limit. An override that is not
    a positive integer is ignored, as Claude Code ignores an invalid env value."""
    if override is None or override <= 0:
        return default_max_tokens(model, table=table, capped_default=capped_default)
    return min(override, max_tokens_upper_limit(model, table=table))


__all__ = [
    "CAPPED_DEFAULT_MAX_TOKENS",
    "DEFAULT_FALLBACK_LIMITS",
    "DEFAULT_FAMILY_ROWS",
    "DEFAULT_MAX_TOKENS_TABLE",
    "ESCALATED_MAX_TOKENS",
    "FamilyRow",
    "MaxTokensLimits",
    "MaxTokensTable",
    "default_max_tokens",
    "max_tokens_upper_limit",
    "resolve_max_tokens",
    "undated_model_id",
]
