"""Tool confinement, the I/O side: the bubblewrap runner of sandboxed commands, the allow-listing proxy that
is their only network (``bridge.py`` runs inside each sandbox), and the per-session workspaces under the
tools root (the rules are in ``agentbus_redis.confinement``)."""

from agentbus_redis.sandbox.proxy import DomainProxy
from agentbus_redis.sandbox.runner import Sandbox, SandboxUnavailable, find_bwrap
from agentbus_redis.sandbox.workspaces import SessionWorkspaces

__all__ = ["DomainProxy", "Sandbox", "SandboxUnavailable", "SessionWorkspaces", "find_bwrap"]
