"""A3.7/H8: the permission context a child session's tool calls are decided in — the tool workers' own
rules with the child's mode (from its record) and the sub-agent texts (``SUBAGENT_REJECT_MESSAGE``). A
background child cannot ask anyone (A3.7, H8.2): an "ask" is denied with ``AUTO_REJECT_MESSAGE(<tool>)``,
even where the workers' ``ask_policy`` is ``approve``."""

from __future__ import annotations

from dataclasses import replace
from typing import get_args

from agentbus_redis.agents.ids import is_child_session
from agentbus_redis.permissions.decide import PermissionContext, PermissionMode
from agentbus_redis.subagents.store import AgentStore

_MODES = frozenset(get_args(PermissionMode))
CACHE_SIZE = 4096


class SessionPermissions:
    """``await permissions(session_id)``: the base context for a top-level session, the child's otherwise
    (records never change: cached)."""

    def __init__(self, store: AgentStore, base: PermissionContext) -> None:
        self.store = store
        self.base = base
        self._cache: dict[str, PermissionContext] = {}

    async def __call__(self, session_id: str) -> PermissionContext:
        if not is_child_session(session_id):
            return self.base
        cached = self._cache.get(session_id)
        if cached is not None:
            return cached
        found = await self.store.record(session_id)
        mode = found[0].permission_mode if found is not None else None
        context = replace(self.base, is_subagent=True)
        if found is not None and found[0].background:
            context = replace(context, ask_policy="auto_reject")
        if mode in _MODES:
            context = replace(context, mode=mode)  # type: ignore[arg-type]
        if len(self._cache) >= CACHE_SIZE:
            self._cache.clear()
        self._cache[session_id] = context
        return context
