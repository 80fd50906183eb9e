"""The typed tool interface (R8.4): a tool is generic over a pydantic input model.

``call`` is an async generator: it yields any number of :class:`ToolProgress` and then exactly one
:class:`ToolOutput`. A failure the model should read as a tool error is raised as
:class:`ToolError`; any other exception becomes ``Error calling tool (NAME): MSG`` (R8.1).
"""

from __future__ import annotations

import abc
from collections.abc import AsyncIterator, Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Generic, Literal, TypeVar

from pydantic import BaseModel, ConfigDict

from agentbus_redis.json_types import JsonObject, JsonValue
from agentbus_redis.messages.content import ContentBlock
from agentbus_redis.tools.definitions import ToolDefinition
from agentbus_redis.tools.schema import api_input_schema

if TYPE_CHECKING:  # the sandbox rules (which name session ids) are the caller's: only the type is needed here
    from agentbus_redis.confinement.network import NetworkPolicy

InterruptBehavior = Literal["block", "cancel"]
"""On a user interrupt (R8.9): ``block`` tools finish, ``cancel`` tools are stopped."""


class ToolInput(BaseModel):
    """Base of tool input models: unknown keys are rejected (Claude Code's strict schemas)."""

    model_config = ConfigDict(extra="forbid", frozen=True)


InputT = TypeVar("InputT", bound=BaseModel)


@dataclass(frozen=True, slots=True)
class ToolProgress:
    """A progress event (R1.6/R8.3). ``data`` carries its own ``type`` (e.g. ``bash_progress``);
    ``tool_use_id`` is a nested id when the progress comes from a child (default: the running tool)."""

    data: JsonObject
    tool_use_id: str | None = None


@dataclass(frozen=True, slots=True)
class ToolOutput:
    """The one final result: ``content`` goes into the ``tool_result`` block, ``tool_use_result`` is
    the structured copy stored beside it (``toolUseResult``), ``sibling_blocks`` are extra top-level
    blocks of the same user message (e.g. images), never inside the tool_result."""

    content: str | list[ContentBlock]
    is_error: bool = False
    tool_use_result: JsonValue = None
    sibling_blocks: tuple[ContentBlock, ...] = ()
    outcome: str = ""
    """The metrics outcome when it is not plain ok/error: denied, timeout, interrupted."""
    error_type: str = ""
    """Why an error result failed, when the outcome does not say (the ``error.type`` of its span):
    tool_not_found, invalid_input, tool_error, or the qualified class name of an exception."""


class ToolError(Exception):
    """A failure reported to the model as ``<tool_use_error>MESSAGE</tool_use_error>`` with
    toolUseResult ``Error: MESSAGE`` (R8.1, the tool's own validation failure)."""

    def __init__(self, message: str) -> None:
        self.message = message
        super().__init__(message)


@dataclass(frozen=True, slots=True)
class ToolContext:
    """Per-call facts a tool may need."""

    tool_use_id: str
    traceparent: str | None = None
    """The call's own ``execute_tool`` span: a tool that starts work elsewhere (a child session) continues it."""
    sandbox_network: NetworkPolicy | None = None
    """What the calling session's sandboxed commands may reach: its own allow-list narrowed from the
    deployment's (None: the deployment's)."""
    sandbox_network_refused: str | None = None
    """Why the calling session's network allow-list was refused (it asks for more than the deployment allows,
    or does not parse): a sandboxed command does not run (never with a wider list instead)."""


class Tool(abc.ABC, Generic[InputT]):
    """Base class of every tool. Subclasses set ``name``, ``input_model`` (and ``aliases``), say what
    the tool does in ``description`` and implement ``call`` as an async generator."""

    name: str = ""
    aliases: tuple[str, ...] = ()
    input_model: type[InputT]
    timeout_s: float | None = None
    """This tool's own time limit per call; None: the worker's (``AGENTBUS_TOOLS__TIMEOUT_S``). A limit the
    operator sets for the tool by name still wins (executor ``ToolTimeouts.per_tool``)."""

    def description(self) -> str:
        """What the model is told the tool does (M1.8), true of this instance (its limits). Each field's
        own ``description`` in ``input_model`` explains that parameter."""
        return ""

    def definition(self) -> ToolDefinition:
        """The tool as the model sees it: name, description, and the input schema derived from
        ``input_model`` (tools/schema.py), so the schema is always the one calls are validated with."""
        schema = api_input_schema(self.input_model.model_json_schema())
        return ToolDefinition(name=self.name, description=self.description(), input_schema=schema)

    def is_read_only(self, tool_input: InputT) -> bool:
        """True when the call cannot change anything (permission checks use it)."""
        return False

    def is_concurrency_safe(self, tool_input: InputT) -> bool:
        """R8.4: may run concurrently with other safe calls. Default False."""
        return False

    def runs_again_harmlessly(self, tool_input: InputT) -> bool:
        """Running the call twice does no more than running it once, so a job re-run after its worker died
        may run it again; otherwise the worker runs it at most once (executor.py ``run_claim``). Default: a
        read-only call."""
        return self.is_read_only(tool_input)

    def interrupt_behavior(self) -> InterruptBehavior:
        """R8.4: default ``block``."""
        return "block"

    async def validate_input(self, tool_input: InputT, ctx: ToolContext) -> None:
        """Checks before the permission step; raise :class:`ToolError` to reject the call."""

    def permission_paths(self, tool_input: InputT) -> list[str]:
        """Absolute paths (symlinks resolved) the call touches, checked by the permission rules in
        addition to the path written in the input."""
        return []

    @abc.abstractmethod
    def call(self, tool_input: InputT, ctx: ToolContext) -> AsyncIterator[ToolProgress | ToolOutput]:
        """Run the tool: yield progress, then exactly one :class:`ToolOutput` (an ``async def``
        generator in subclasses)."""


AnyTool = Tool[Any]


def json_list(items: Iterable[JsonValue]) -> list[JsonValue]:
    """A list typed as JSON (lists are invariant, so ``list[str]`` is not a ``list[JsonValue]``)."""
    result: list[JsonValue] = list(items)
    return result
