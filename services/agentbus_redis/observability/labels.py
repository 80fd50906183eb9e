"""Bounded label values: the only strings that may become Prometheus label values.

Every label set must stay small under ``sum()`` (ecosystem.md §1.8, §4.4): a stream is reported by its
*family* (``ingress``, ``log``, ``tool_jobs``, ``requests``), never by its shard-numbered name, and never
by anything carrying a session id; event types, tools and rule codes go through a :class:`LabelGuard`
that maps anything outside its allowlist (or beyond its capacity) to ``other``.
"""

from __future__ import annotations

import re
import typing
from collections.abc import Iterable
from typing import Final, Literal

from agentbus_redis.approvals.records import ApprovalContinuation
from agentbus_redis.bus.events import IngressPayload, RequestReady, ToolJob
from agentbus_redis.messages.kinds import CONTROL_TYPES, STORED_TYPES
from agentbus_redis.normalize.report import RepairKind
from agentbus_redis.wire import type_literal

OTHER: Final = "other"
"""The catch-all label value for anything outside an allowlist."""

WorkerType = Literal["ingestion", "tools", "normalization", "transcripts", "model"]
WORKER_TYPES: Final[tuple[WorkerType, ...]] = ("ingestion", "tools", "normalization", "transcripts", "model")
"""The five worker types; the names of ``agentbus worker NAME`` and the ``worker`` label."""

StreamFamily = Literal["ingress", "log", "tool_jobs", "requests"]
STREAM_FAMILIES: Final[tuple[StreamFamily, ...]] = ("ingress", "log", "tool_jobs", "requests")

_FAMILY_SUFFIXES: Final[tuple[tuple[str, StreamFamily], ...]] = (
    (":ingress", "ingress"),
    (":log", "log"),
    (":tools:jobs", "tool_jobs"),
    (":requests", "requests"),
)
_DLQ_SUFFIX: Final = ":dlq"
_FAMILY_CACHE_LIMIT: Final = 4096
_family_cache: dict[str, str] = {}

_SAFE_VALUE = re.compile(r"[A-Za-z0-9_.:\-]{1,64}")


def stream_family(stream: str) -> str:
    """The family label of a stream name: ``agentbus:{s03}:ingress`` → ``ingress``.

    Accepts a family name as is. A dead-letter stream maps to ``<family>_dlq``; anything else to ``other``.
    The suffix match works whatever the configured prefix. Results are cached (stream names are few), so a
    per-batch call costs one dict lookup.
    """
    cached = _family_cache.get(stream)
    if cached is not None:
        return cached
    family = _family_of(stream)
    if len(_family_cache) < _FAMILY_CACHE_LIMIT:
        _family_cache[stream] = family
    return family


def _family_of(stream: str) -> str:
    if stream in STREAM_FAMILIES or (stream.endswith("_dlq") and stream[:-4] in STREAM_FAMILIES):
        return stream
    dead_letters = stream.endswith(_DLQ_SUFFIX)
    base = stream[: -len(_DLQ_SUFFIX)] if dead_letters else stream
    for tail, family in _FAMILY_SUFFIXES:
        if base.endswith(tail):
            return f"{family}_dlq" if dead_letters else family
    if ":tools:pool:" in base and base.endswith(":jobs"):  # a named pool's jobs (streams/topology.py)
        return "tool_jobs_dlq" if dead_letters else "tool_jobs"
    return OTHER


def _ingress_types() -> frozenset[str]:
    """The ``type`` literals of every ingress payload model, read from the discriminated union."""
    union = typing.get_args(IngressPayload)[0]  # Annotated[Union[...], Field(discriminator=...)]
    return frozenset(type_literal(model) for model in typing.get_args(union))


EVENT_TYPE_INVALID: Final = "invalid"
"""The event type label of an entry that could not be decoded (its claimed type is not trusted)."""

EVENT_TYPES: Final[frozenset[str]] = (
    _ingress_types()
    | STORED_TYPES
    | CONTROL_TYPES
    | {type_literal(ToolJob), type_literal(RequestReady), EVENT_TYPE_INVALID}
    | {type_literal(ApprovalContinuation)}
)
"""Every event type a worker may count: ingress payloads, log messages, tool jobs, request notices."""

REPAIR_KINDS: Final[frozenset[str]] = frozenset(kind.value for kind in RepairKind)

ToolOutcome = Literal["ok", "error", "denied", "timeout", "interrupted", "placeholder"]
TOOL_OUTCOMES: Final[tuple[ToolOutcome, ...]] = ("ok", "error", "denied", "timeout", "interrupted", "placeholder")

BUILTIN_TOOLS: Final[frozenset[str]] = frozenset({"Read", "Glob", "Grep", "Write", "Edit", "Bash"})


class LabelGuard:
    """Keeps one label's values bounded: an allowlist, or first-come values up to ``capacity``.

    A value outside the allowlist, not matching ``[A-Za-z0-9_.:-]{1,64}``, or new once ``capacity``
    distinct values were seen, becomes ``other``. Decisions are cached, so a repeated value costs a dict
    lookup.
    """

    def __init__(self, allowed: Iterable[str] | None = None, *, capacity: int = 64) -> None:
        self.allowed = frozenset(allowed) if allowed is not None else None
        self.capacity = capacity
        self._admitted: set[str] = set()
        self._decided: dict[str, str] = {}

    def __call__(self, value: str) -> str:
        decided = self._decided.get(value)
        if decided is None:
            decided = self._decide(value)
            if len(self._decided) < 4 * self.capacity:
                self._decided[value] = decided
        return decided

    def _decide(self, value: str) -> str:
        if self.allowed is not None:
            return value if value in self.allowed else OTHER
        if value in self._admitted:
            return value
        if not _SAFE_VALUE.fullmatch(value) or len(self._admitted) >= self.capacity:
            return OTHER
        self._admitted.add(value)
        return value


def tool_label(name: str) -> str:
    """The ``tool`` label: built-in names as is, ``mcp__server__tool`` as ``mcp``, anything else ``other``.

    MCP and plugin tool names are open-ended, so they are folded rather than counted one by one.
    """
    if name in BUILTIN_TOOLS:
        return name
    if name.startswith("mcp__"):
        return "mcp"
    return OTHER
