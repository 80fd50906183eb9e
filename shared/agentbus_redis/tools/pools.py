"""Tool pools: routing each call to a worker that has its tool (issue 29).

Tool workers need not be alike: each belongs to one *pool* (``agentbus worker tools --pool NAME``; the
built-ins' pool is ``default``), reads only its pool's job streams, and says in its catalog entry which pool
it serves. Ingestion splits the calls of one assistant reply by the pool of each call's tool, as the live
catalog says (:func:`tool_routes`), and writes one job per pool (:func:`split_by_pool`), each keeping its calls
in the order the model made them. Every result goes back to the session's ledger, which keeps the calls'
order whatever order the results arrive in.

A tool several pools offer goes to the first of them by name (every reader picks the same). A tool no live
worker offers goes to a pool that has live workers (``default`` when it has): that worker answers it with
Claude Code's ``No such tool available`` error, so the call is never left waiting. When no tool worker is live
at all, jobs go to ``default`` and wait for one (the tool deadline answers them if none comes).

Calls of one reply in different pools run at the same time: the R8.5 order (an unsafe call runs alone, after
the calls before it) holds within each pool's share of the reply, not across pools.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from agentbus_redis.messages.content import ToolUseBlock
from agentbus_redis.tools.catalog import CatalogEntry

DEFAULT_POOL = "default"
"""The pool of a worker that names none (and of catalog entries written before pools existed)."""
_POOL_NAME = re.compile(r"^[a-z0-9][a-z0-9_-]{0,31}$")
RESERVED_POOL_NAMES = frozenset({"dlq"})
"""A pool name becomes part of a stream name: one that reads as a suffix of another stream is refused."""


def pool_name_problem(name: str) -> str | None:
    """Why ``name`` cannot name a pool, or None (it becomes part of stream names and a metrics label)."""
    if _POOL_NAME.fullmatch(name) is None:
        return f"pool name {name!r} must be 1-32 lowercase letters, digits, '_' or '-', starting with a letter or digit"
    if name in RESERVED_POOL_NAMES:
        return f"pool name {name!r} is reserved"
    return None


@dataclass(frozen=True, slots=True)
class ToolRoutes:
    """Which pool runs each tool, and which pools have live workers (from one read of the catalog)."""

    pool_of_tool: Mapping[str, str] = field(default_factory=dict)
    live_pools: frozenset[str] = frozenset()

    def pool_of(self, tool_name: str) -> str:
        """The pool a call of ``tool_name`` goes to (see the module docstring for tools no pool offers)."""
        pool = self.pool_of_tool.get(tool_name)
        if pool is not None:
            return pool
        if not self.live_pools or DEFAULT_POOL in self.live_pools:
            return DEFAULT_POOL
        return min(self.live_pools)


def tool_routes(entries: Iterable[CatalogEntry], *, now_ms: int) -> ToolRoutes:
    """The routes the live ``entries`` make: each tool to the first pool (by name) that offers it."""
    pools: dict[str, str] = {}
    live: set[str] = set()
    for entry in entries:
        if not entry.live(now_ms):
            continue
        live.add(entry.pool)
        for definition in entry.tools:
            held = pools.get(definition.name)
            if held is None or entry.pool < held:
                pools[definition.name] = entry.pool
    return ToolRoutes(pools, frozenset(live))


def split_by_pool(calls: Sequence[ToolUseBlock], routes: ToolRoutes) -> list[tuple[str, list[ToolUseBlock]]]:
    """``calls`` (one reply's, in order) grouped by pool: pools in the order of their first call, each pool's
    calls in their order."""
    groups: dict[str, list[ToolUseBlock]] = {}
    for call in calls:
        groups.setdefault(routes.pool_of(call.name), []).append(call)
    return list(groups.items())
