"""Tool confinement, the I/O side: the bubblewrap runner of sandboxed commands and the per-session
workspaces under the tools root (the rules are in ``agentbus_redis.confinement``)."""
