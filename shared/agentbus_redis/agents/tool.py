"""A1 the ``Agent`` tool: its input (A1.2), the prompt that lists the agent types (A1.1), its API tool
definition (M1.8), and the validation errors of A1.3 (exact texts).

Fields of A1.2 that belong to features we do not run (worktree isolation, teams, ``cwd``) are left out of
the schema, as Claude Code strips them when the feature is off; a call that sends one anyway is refused by
the strict input model (R8.1 InputValidationError) rather than ignored. ``run_in_background`` is in the
schema unless background tasks are disabled (A9, ``AGENTBUS_AGENTS__BACKGROUND_TASKS=false``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

from pydantic import BaseModel, ConfigDict

from agentbus_redis.agents.definitions import GENERAL_PURPOSE, AgentDefinition
from agentbus_redis.permissions.rules import PermissionRule
from agentbus_redis.tools.definitions import ToolDefinition

AGENT_TOOL_NAME = "Agent"
LEGACY_AGENT_TOOL_NAME = "Task"
"""A1.1: accepted on input, never emitted."""
AGENT_TOOL_DESCRIPTION = "Launch a new agent"
AGENT_RESULT_SIZE_LIMIT = 100_000
"""A1.1/A9: result size limit (characters) of the Agent tool."""

ModelAlias = Literal["sonnet", "opus", "haiku"]


RUN_IN_BACKGROUND_FIELD: dict[str, object] = {
    "type": "boolean",
    "description": "Set to true to run this agent in the background. You will be notified when it completes.",
}


def agent_input_fields(*, background: bool = True) -> dict[str, object]:
    """A1.2 the input schema (JSON Schema object) with Claude Code's field descriptions; ``run_in_background``
    only when background tasks are enabled (A9)."""
    schema = _agent_input_schema()
    if background:
        properties = schema["properties"]
        assert isinstance(properties, dict)
        properties["run_in_background"] = dict(RUN_IN_BACKGROUND_FIELD)
    return schema


def _agent_input_schema() -> dict[str, object]:
    return {
        "type": "object",
        "properties": {
            "description": {"type": "string", "description": "A short (3-5 word) description of the task"},
            "prompt": {"type": "string", "description": "The task for the agent to perform"},
            "subagent_type": {"type": "string", "description": "The type of specialized agent to use for this task"},
            "model": {
                "type": "string",
                "enum": ["sonnet", "opus", "haiku"],
                "description": "Optional model override for this agent. Takes precedence over the agent "
                "definition's model. If not specified, uses the agent definition's model, or inherits from "
                "the parent.",
            },
        },
        "required": ["description", "prompt"],
        "additionalProperties": False,
        "$schema": "http://json-schema.org/draft-07/schema#",
    }


class AgentInput(BaseModel):
    """A1.2 the input the model sends (unknown keys refused, as Claude Code's strict schemas do)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    description: str
    prompt: str
    subagent_type: str | None = None
    model: ModelAlias | None = None
    run_in_background: bool | None = None


def agent_type_of(subagent_type: str | None) -> str:
    """A1.2: an omitted ``subagent_type`` is ``general-purpose`` (fork mode is off)."""
    return subagent_type or GENERAL_PURPOSE


def _tools_text(agent: AgentDefinition) -> str:
    if agent.all_tools:
        base = "All tools"
        if agent.disallowed_tools:
            return f"{base} except {', '.join(agent.disallowed_tools)}"
        return base
    return ", ".join(agent.tools or []) or "None"


def agent_tool_prompt(agents: Sequence[AgentDefinition]) -> str:
    """A1.1: the tool description the model reads, listing the available agent types as Claude Code does
    (``- <type>: <when to use> (Tools: <tools>)``)."""
    lines = [f"- {agent.name}: {agent.description} (Tools: {_tools_text(agent)})" for agent in agents]
    return (
        "Launch a new agent to handle complex, multi-step tasks autonomously.\n\n"
        "The Agent tool launches specialized agents (subprocesses) that autonomously handle complex tasks. "
        "Each agent type has specific capabilities and tools available to it.\n\n"
        "Available agent types and the tools they have access to:\n"
        + "\n".join(lines)
        + "\n\nWhen using the Agent tool, specify a subagent_type parameter to select which agent type to use. "
        f"If omitted, the {GENERAL_PURPOSE} agent is used.\n\n"
        "Usage notes:\n"
        "- Launch multiple agents concurrently whenever possible, to maximize performance; to do that, use a "
        "single message with multiple tool uses\n"
        "- When the agent is done, it will return a single message back to you. The result returned by the "
        "agent is not visible to the user. To show the user the result, you should send a text message back to "
        "the user with a concise summary of the result.\n"
        "- Each agent invocation starts fresh: provide a highly detailed task description in the prompt, and "
        "say exactly what information the agent should return back to you in its final and only message."
    )


def agent_tool_definition(agents: Sequence[AgentDefinition], *, background: bool = True) -> ToolDefinition:
    """M1.8: ``{name: "Agent", description: <the prompt>, input_schema}``."""
    return ToolDefinition(
        name=AGENT_TOOL_NAME,
        description=agent_tool_prompt(agents),
        input_schema=agent_input_fields(background=background),
    )


BACKGROUND_DISABLED = "Background agents are disabled on this bus: run the agent without run_in_background."
"""A9 (agentbus text): ``run_in_background`` sent while background tasks are disabled."""


def denied_agent_types(deny_rules: Sequence[PermissionRule]) -> dict[str, PermissionRule]:
    """A1.1: ``Agent(<type>)`` deny rules (legacy ``Task(<type>)`` is canonicalised by the rule parser)."""
    return {
        rule.content: rule
        for rule in deny_rules
        if rule.tool_name == AGENT_TOOL_NAME and rule.content is not None and rule.behavior == "deny"
    }


def agent_not_found(agent_type: str, available: Sequence[str]) -> str:
    """A1.3, exact."""
    return f"Agent type '{agent_type}' not found. Available agents: {', '.join(available)}"


def agent_denied(agent_type: str, source: str) -> str:
    """A1.3, exact."""
    return f"Agent type '{agent_type}' has been denied by permission rule 'Agent({agent_type})' from {source}."
