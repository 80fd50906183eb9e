"""Tool confinement, the I/O side: the bubblewrap runner of sandboxed commands and the per-session
workspaces under the tools root (the rules are in ``agentbus_redis.confinement``)."""

from agentbus_redis.sandbox.runner import Sandbox, SandboxUnavailable, find_bwrap
from agentbus_redis.sandbox.workspaces import SessionWorkspaces

__all__ = ["Sandbox", "SandboxUnavailable", "SessionWorkspaces", "find_bwrap"]
