"""The tool catalog: which tools the live tool workers can run, as the model is to be offered them (issue 18).

Each tool worker keeps one entry in a Redis hash (``Topology.tool_catalog``; field = the worker's id, value =
a :class:`CatalogEntry` as JSON), rewritten every refresh interval with a later ``expires_ms``. A worker that
stops removes its entry; one that dies stops refreshing and its entry expires. This module is the pure part:
the entry's shape and how entries merge into the list of tools offered.
"""

from __future__ import annotations

from collections.abc import Iterable

from pydantic import ConfigDict, Field

from agentbus_redis.tools.definitions import ToolDefinition
from agentbus_redis.wire import WireModel


class CatalogEntry(WireModel):
    """One tool worker's tools: what it can run, and until when this claim holds unless refreshed."""

    model_config = ConfigDict(extra="allow", frozen=True)

    worker: str = Field(min_length=1)
    """The worker's consumer id (also the hash field)."""
    refreshed_ms: int
    """Epoch ms of the write (the worker's clock)."""
    expires_ms: int
    """Epoch ms after which the entry no longer counts: the worker is presumed dead."""
    tools: list[ToolDefinition]
    pool: str = "default"
    """The pool the worker serves (tools/pools.py): calls of its tools are routed to that pool's job streams."""

    def live(self, now_ms: int) -> bool:
        return now_ms < self.expires_ms


def merge_catalog(entries: Iterable[CatalogEntry], *, now_ms: int) -> list[ToolDefinition]:
    """The union of the live entries' tools, sorted by name. Two workers offering one tool name with different
    definitions (a rolling upgrade) → the most recently refreshed entry's wins (ties: the larger worker id, so
    every reader picks the same one)."""
    chosen: dict[str, tuple[tuple[int, str], ToolDefinition]] = {}
    for entry in entries:
        if not entry.live(now_ms):
            continue
        rank = (entry.refreshed_ms, entry.worker)
        for tool in entry.tools:
            held = chosen.get(tool.name)
            if held is None or rank > held[0]:
                chosen[tool.name] = (rank, tool)
    return [chosen[name][1] for name in sorted(chosen)]
