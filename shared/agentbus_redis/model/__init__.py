"""The model call (agent-loop.md §M) as pure rules: request shape, retry policy, error texts, limits,
prompt caching, usage and cost. The worker that makes the call lives in ``workers/model``."""
