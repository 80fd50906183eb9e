"""Agent definitions and limits from the settings (``AGENTBUS_AGENTS__*``)."""

from __future__ import annotations

from agentbus_redis.agents.definitions import AgentCatalog, InvalidAgentDefinitions, parse_definitions
from agentbus_redis.agents.limits import AgentLimits
from agentbus_redis.config.settings import AgentSettings
from agentbus_redis.subagents.launcher import AgentSetup


def agent_catalog(settings: AgentSettings) -> AgentCatalog:
    """The built-ins and the definitions file; raises :class:`InvalidAgentDefinitions` naming the file."""
    configured = []
    path = settings.definitions_file
    if path is not None:
        try:
            text = path.read_text(encoding="utf-8")
        except OSError as error:
            raise InvalidAgentDefinitions(str(path), f"cannot be read: {error.strerror or error}") from error
        configured = parse_definitions(text, source=str(path), toml=path.suffix.lower() == ".toml")
    return AgentCatalog.build(configured, builtins=settings.builtin_agents)


def agent_limits(settings: AgentSettings) -> AgentLimits:
    return AgentLimits(
        max_depth=settings.max_depth,
        max_children=settings.max_children,
        max_tokens=settings.max_tokens,
        wall_time_s=settings.wall_time_s,
    )


def agent_setup(settings: AgentSettings, *, cwd: str) -> AgentSetup:
    return AgentSetup(
        catalog=agent_catalog(settings),
        limits=agent_limits(settings),
        model_aliases=dict(settings.model_aliases),
        cwd=cwd,
        subagent_model=settings.subagent_model,
        background_tasks=settings.background_tasks,
        launch_ride_out_s=settings.launch_ride_out_s,
    )
