"""A2 agent definitions: where they come from, the built-in ``general-purpose``, and what a definition
decides about its child (A3.3 system prompt, A3.4 tools, A3.5 model, A3.6 thinking, A3.7 mode).

Definitions are configured as a JSON or TOML document (``AGENTBUS_AGENTS__DEFINITIONS_FILE``) mapping an
agent name to the fields of the Agent SDK's ``AgentDefinition`` (A2.2, snake_case or the SDK's camelCase):
``{"reviewer": {"description": "…", "prompt": "…", "tools": ["Read", "Grep"], "model": "haiku"}}`` (a
top-level ``agents`` table is accepted too). The built-ins (A2.1: ``general-purpose``) come first unless
disabled; a configured agent of the same name replaces a built-in.
"""

from __future__ import annotations

import json
import tomllib
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

from pydantic import AliasChoices, ConfigDict, Field, ValidationError

from agentbus_redis.errors import AgentbusError
from agentbus_redis.wire import WireModel

GENERAL_PURPOSE = "general-purpose"
"""A1.2: the agent type used when ``subagent_type`` is omitted; A2.1: always built in."""

ALL_TOOLS = "*"

GENERAL_PURPOSE_PROMPT = (
    "You are an agent for Claude Code, Anthropic's official CLI for Claude. Given the user's message, you "
    "should use the tools available to complete the task. Do what has been asked; nothing more, nothing less. "
    "When you complete the task, respond with a concise report covering what was done and any key findings "
    "— the caller will relay this to the user, so it only needs the essentials."
)
"""A2.3: starts with Claude Code's exact first two sentences; the rest (asking for "a concise report
covering what was done and any key findings") is our wording of what the spec summarises."""

GENERAL_PURPOSE_DESCRIPTION = (
    "General-purpose agent for researching complex questions, searching for code, and executing multi-step "
    "tasks. When you are searching for a keyword or file and are not confident that you will find the right "
    "match in the first few tries use this agent to perform the search for you."
)

SUBAGENT_EXCLUDED_TOOLS = frozenset(
    {"TaskOutput", "ExitPlanMode", "EnterPlanMode", "Agent", "Task", "AskUserQuestion", "TaskStop"}
)
"""A3.4: removed for every sub-agent (``Agent`` only while nesting is off, A9)."""

ONE_SHOT_BUILTINS = frozenset({"Explore", "Plan"})
"""A5.2: built-ins whose result carries no agentId/usage trailer."""

THINKING_DISABLED = {"type": "disabled"}
"""A3.6: thinking is off for normal sub-agents (cost control)."""

PERMISSION_MODES = ("default", "acceptEdits", "bypassPermissions", "plan", "dontAsk")
PARENT_MODES_THAT_WIN = frozenset({"bypassPermissions", "acceptEdits", "auto"})
"""A3.7: a parent in one of these modes keeps it for its children."""


class AgentDefinition(WireModel):
    """A2.2 one agent definition (``name`` is the agent type the model asks for)."""

    model_config = ConfigDict(extra="allow", frozen=True)

    name: str = Field(min_length=1, max_length=128, pattern=r"^[A-Za-z0-9_.:-]+$")
    description: str = Field(min_length=1, description="when to use it: the model chooses by this")
    prompt: str = Field(min_length=1, description="the sub-agent's system prompt")
    tools: list[str] | None = None
    """Allow-list; None or ``["*"]``: every tool the parent has (minus A3.4's exclusions)."""
    disallowed_tools: list[str] = Field(
        default_factory=list, validation_alias=AliasChoices("disallowed_tools", "disallowedTools")
    )
    model: str | None = None
    """``sonnet`` / ``opus`` / ``haiku`` / ``inherit`` or a full model id; None: inherit."""
    permission_mode: Literal["default", "acceptEdits", "bypassPermissions", "plan", "dontAsk"] | None = Field(
        default=None, validation_alias=AliasChoices("permission_mode", "permissionMode")
    )
    max_turns: int | None = Field(default=None, ge=1, validation_alias=AliasChoices("max_turns", "maxTurns"))
    builtin: bool = False

    @property
    def all_tools(self) -> bool:
        return self.tools is None or ALL_TOOLS in self.tools


GENERAL_PURPOSE_AGENT = AgentDefinition(
    name=GENERAL_PURPOSE,
    description=GENERAL_PURPOSE_DESCRIPTION,
    prompt=GENERAL_PURPOSE_PROMPT,
    tools=[ALL_TOOLS],
    builtin=True,
)


class InvalidAgentDefinitions(AgentbusError, ValueError):
    """The definitions document cannot be used; ``where`` names the file (and agent) at fault."""

    def __init__(self, where: str, problem: str) -> None:
        super().__init__(f"{where}: {problem}")
        self.where = where
        self.problem = problem


def parse_definitions(text: str, *, source: str, toml: bool) -> list[AgentDefinition]:
    """The agents of a JSON (or TOML) document; raises :class:`InvalidAgentDefinitions` with the agent's
    name and the failing field."""
    try:
        document: object = tomllib.loads(text) if toml else json.loads(text)
    except (ValueError, tomllib.TOMLDecodeError) as error:
        raise InvalidAgentDefinitions(source, f"not valid {'TOML' if toml else 'JSON'}: {error}") from error
    if isinstance(document, Mapping) and isinstance(document.get("agents"), Mapping):
        document = document["agents"]
    if not isinstance(document, Mapping):
        raise InvalidAgentDefinitions(source, "expected an object mapping agent names to definitions")
    agents: list[AgentDefinition] = []
    for name, fields in document.items():
        if not isinstance(fields, Mapping):
            raise InvalidAgentDefinitions(f"{source}: agent {name!r}", "a definition must be an object")
        try:
            agents.append(AgentDefinition.model_validate({**fields, "name": name, "builtin": False}))
        except ValidationError as error:
            issue = error.errors(include_url=False)[0]
            field = ".".join(str(part) for part in issue["loc"]) or "definition"
            raise InvalidAgentDefinitions(f"{source}: agent {name!r}", f"{field}: {issue['msg']}") from error
    return agents


@dataclass(frozen=True, slots=True)
class AgentCatalog:
    """The agent types the ``Agent`` tool offers, in prompt order."""

    agents: tuple[AgentDefinition, ...]

    @classmethod
    def build(cls, configured: Iterable[AgentDefinition], *, builtins: bool = True) -> AgentCatalog:
        """A2.1: built-ins (unless disabled, like ``CLAUDE_AGENT_SDK_DISABLE_BUILTIN_AGENTS``), then the
        configured agents; a configured agent replaces the built-in of the same name."""
        by_name: dict[str, AgentDefinition] = {}
        if builtins:
            by_name[GENERAL_PURPOSE] = GENERAL_PURPOSE_AGENT
        for agent in configured:
            by_name[agent.name] = agent
        return cls(tuple(by_name.values()))

    def get(self, name: str) -> AgentDefinition | None:
        return next((agent for agent in self.agents if agent.name == name), None)

    @property
    def names(self) -> list[str]:
        return [agent.name for agent in self.agents]

    def visible(self, denied_types: Iterable[str]) -> list[AgentDefinition]:
        """A1.1: types denied by an ``Agent(<type>)`` rule are hidden from the prompt."""
        denied = set(denied_types)
        return [agent for agent in self.agents if agent.name not in denied]


def child_tools(
    definition: AgentDefinition,
    parent_tools: Sequence[str],
    *,
    allow_nesting: bool = False,
) -> tuple[list[str], list[str]]:
    """A3.4: the child's tools from the parent's pool, and the listed names that are not in it (reported
    as invalid and ignored). Order: the parent's pool order."""
    excluded = set(SUBAGENT_EXCLUDED_TOOLS)
    if allow_nesting:
        excluded -= {"Agent", "Task"}
    pool = [name for name in parent_tools if name not in excluded and name not in definition.disallowed_tools]
    if definition.all_tools:
        return pool, []
    wanted = definition.tools or []
    invalid = [name for name in wanted if name not in parent_tools]
    return [name for name in pool if name in wanted], invalid


MODEL_TIERS = ("sonnet", "opus", "haiku")


def child_model(
    *,
    call_model: str | None,
    definition_model: str | None,
    parent_model: str | None,
    aliases: Mapping[str, str],
    override: str | None = None,
) -> str | None:
    """A3.5: ``override`` (``CLAUDE_CODE_SUBAGENT_MODEL``'s place) wins; else the call's ``model`` alias,
    else the definition's model; ``inherit`` / nothing → the parent's model (None: the worker's default).
    An alias naming the parent's own tier keeps the parent's exact model string."""
    if override:
        return override
    chosen = call_model or definition_model
    if chosen is None or chosen == "inherit":
        return parent_model
    if chosen in MODEL_TIERS:
        if parent_model is not None and chosen in parent_model.lower():
            return parent_model
        return aliases.get(chosen, chosen)
    return chosen


ENVIRONMENT_NOTES = (
    "Notes:\n"
    "- Agent threads always have their cwd reset between bash calls, as a result please only use absolute "
    "file paths.\n"
    "- In your final response, share file paths (always absolute, never relative) that are relevant to the "
    "task. Include code snippets only when the exact text is load-bearing."
)


def child_system_prompt(definition: AgentDefinition, *, cwd: str, model: str | None, tools: Sequence[str]) -> str:
    """A3.3: the definition's prompt enhanced with environment details (cwd, platform, model, tools).
    The CLI prefix block (M1.4) is added by the model worker at request time."""
    env = [f"Working directory: {cwd}", "Platform: linux"]
    if model:
        env.append(f"Model: {model}")
    env.append(f"Enabled tools: {', '.join(tools) if tools else '(none)'}")
    return f"{definition.prompt}\n\n{ENVIRONMENT_NOTES}\n\n<env>\n" + "\n".join(env) + "\n</env>"


def child_permission_mode(definition: AgentDefinition, parent_mode: str) -> str:
    """A3.7: the definition's ``permissionMode``, unless the parent runs in ``bypassPermissions``,
    ``acceptEdits`` (or auto) — then, as without a definition mode, the parent's."""
    if parent_mode in PARENT_MODES_THAT_WIN or definition.permission_mode is None:
        return parent_mode
    return definition.permission_mode
