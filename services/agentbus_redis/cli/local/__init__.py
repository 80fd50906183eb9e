"""agentbus on one machine: ``agentbus up`` (every worker supervised, a private Redis when none is configured),
where its logs go, the newcomer demo it plays, and ``agentbus fake-model``."""
