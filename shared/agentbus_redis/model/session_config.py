"""Per-session settings of the model call, stored on the bus beside the session.

A session without one uses the model worker's configured defaults. A sub-agent's child session gets one
from its agent definition (A2, A3): its own system prompt, tool set and model, thinking off (A3.6), and
the link to its parent. Every field is optional so a session can override only what it needs.
"""

from __future__ import annotations

from pydantic import ConfigDict, Field

from agentbus_redis.json_types import JsonObject
from agentbus_redis.wire import WireModel


class SessionModelConfig(WireModel):
    """How the model worker calls the model for one session (snake_case bus format)."""

    model_config = ConfigDict(extra="allow")

    model: str | None = None
    """Model id; None: the worker's default (``AGENTBUS_MODEL__MODEL``)."""
    fallback_model: str | None = None
    """Model switched to after repeated 529s (M6); None: the worker's default."""
    system_prompt: str | None = None
    """The session's system prompt (everything after the CLI prefix block, M1.4); None: the default."""
    tools: list[str] | None = Field(default=None)
    """Names of the catalog tools offered to the model; None: every tool some worker can run."""
    max_tokens: int | None = Field(default=None, ge=1)
    thinking: JsonObject | None = None
    """The ``thinking`` request field as sent (M1.6); None: the worker's default; ``{"type": "disabled"}``: off."""
    tenant: str | None = None
    """Token-bucket tenant the session's calls are charged to; None: ``default``."""
    parent_session_id: str | None = None
    """Set on a sub-agent's child session: the session whose Agent call started it (A3)."""
    agent_id: str | None = None
    """Set on a sub-agent's child session: its agentId (A4)."""
    agent_type: str | None = None
    """Set on a sub-agent's child session: the agent definition's name (A2)."""
    depth: int = Field(default=0, ge=0)
    """0 for a top-level session, parent depth + 1 for a child (A9)."""
    max_turns: int | None = Field(default=None, ge=1)
    """A3.8 / R10.6: model calls one turn may make; past it the model worker ends the turn with a
    ``max_turns_reached`` attachment instead of calling (model/max_turns.py). None: no limit."""
    sandbox_network: JsonObject | None = None
    """The hosts this session's sandboxed commands may reach, within the deployment's allow-list: a
    :class:`~agentbus_redis.confinement.session_network.SessionSandboxNetwork` (``allowed_domains``,
    ``denied_domains``), read by the tool workers at each job, which refuse the session's commands when it
    asks for more than the deployment allows. A sub-agent's child inherits its parent's. None: the
    deployment's list."""
