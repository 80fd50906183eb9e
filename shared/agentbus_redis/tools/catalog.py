"""The tool catalog: which tools the live tool workers can run, as the model is to be offered them (issue 18).

Each tool worker keeps one entry in a Redis hash (``Topology.tool_catalog``; field = the worker's id, value =
a :class:`CatalogEntry` as JSON), rewritten every refresh interval with a later ``expires_ms``. A worker that
stops removes its entry; one that dies stops refreshing and its entry expires. This module is the pure part:
the entry's shape and how entries merge into the list of tools offered.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from pydantic import ConfigDict, Field

from agentbus_redis.tools.definitions import ToolDefinition
from agentbus_redis.wire import WireModel


class McpServerStatus(WireModel):
    """One MCP server a tool worker connects to, as ``agentbus tools ls`` shows it."""

    name: str
    transport: str
    """stdio or http."""
    state: str
    """connecting, connected, restarting (lost or failing: see ``error``; retried with backoff) or stopped."""
    error: str = ""
    tools: list[str] = Field(default_factory=list)
    """The server's own tool names (offered as ``mcp__<name>__<tool>``)."""
    required: bool = False
    per_session: bool = False
    sandboxed: bool = False
    """A stdio server run under the tool worker's sandbox (``"agentbus": {"sandbox": …}``)."""
    session_connections: int = 0
    connects: int = 0
    """Times the worker connected to it (above 1: it was lost and reconnected)."""
    tools_changed: int = 0
    """Times the server said its tools changed (``notifications/tools/list_changed``) and they were listed again."""


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
    mcp_servers: list[McpServerStatus] = Field(default_factory=list)
    """The MCP servers the worker connects to and their state (a server that is down offers no tools)."""
    pool: str = "default"
    """The pool the worker serves (tools/pools.py): calls of its tools are routed to that pool's job streams."""

    def live(self, now_ms: int) -> bool:
        return now_ms < self.expires_ms


def merge_catalog(entries: Iterable[CatalogEntry], *, now_ms: int) -> list[ToolDefinition]:
    """The union of the live entries' tools, sorted by name. Two workers offering one tool name with different
    definitions (a rolling upgrade) → the most recently refreshed entry's wins (ties: the larger worker id, so
    every reader picks the same one)."""
    return merge_tools(entry for entry in entries if entry.live(now_ms))


@dataclass(frozen=True, slots=True)
class HeldEntry:
    """A catalog entry a reader saw live, and since when (the reader's epoch ms) it has found it missing or
    expired (None: live at the last read)."""

    entry: CatalogEntry
    missing_since_ms: int | None = None


def hold_recently_live(
    held: Mapping[str, HeldEntry], live: Iterable[CatalogEntry], *, now_ms: int, hold_ms: int
) -> dict[str, HeldEntry]:
    """The entries a reader offers after a read at ``now_ms`` that found ``live``: every live entry, plus each
    entry it saw live before that has been missing or expired for less than ``hold_ms`` of its reads.

    Why: an entry expires when its worker stops refreshing it — because the worker died, or because Redis was
    away (restarting, failing over) for longer than the TTL, or came back without the hash. In the latter cases
    the worker writes its entry again within a refresh interval of Redis being back, and a reader that dropped
    the entry meanwhile would send the model requests without the tools for those seconds (issue 25: the soak
    saw 17). The hold counts from the first read that missed the entry, not from the last that saw it: the
    outage itself may have lasted longer than the hold. The price is that a dead worker's tools are offered
    ``hold_ms`` longer than its TTL, and a call to one waits for a worker like any queued job."""
    kept: dict[str, HeldEntry] = {}
    for worker, seen in held.items():
        since = now_ms if seen.missing_since_ms is None else seen.missing_since_ms
        if now_ms - since < hold_ms:
            kept[worker] = HeldEntry(seen.entry, since)
    for entry in live:
        kept[entry.worker] = HeldEntry(entry)
    return kept


def merge_tools(entries: Iterable[CatalogEntry]) -> list[ToolDefinition]:
    """:func:`merge_catalog` without the expiry check (the caller chose the entries)."""
    chosen: dict[str, tuple[tuple[int, str], ToolDefinition]] = {}
    for entry in entries:
        rank = (entry.refreshed_ms, entry.worker)
        for tool in entry.tools:
            held = chosen.get(tool.name)
            if held is None or rank > held[0]:
                chosen[tool.name] = (rank, tool)
    return [chosen[name][1] for name in sorted(chosen)]
