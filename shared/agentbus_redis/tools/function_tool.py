"""A tool in a few lines: ``@tool`` turns an async function typed by a pydantic input model into a
:class:`~agentbus_redis.tools.tool.Tool` (the same interface the built-ins implement), so the executor runs it
with every rule a built-in gets: input validation against the model, permissions, the time limit, interrupts,
at-most-once for side effects, progress, the error texts.

    class WeatherInput(ToolInput):
        city: str = Field(description="The city to report on")

    @tool(read_only=True, timeout_s=10)
    async def weather(args: WeatherInput) -> str:
        \"\"\"The current weather of a city.\"\"\"
        return f"Sunny in {args.city}"

* The first parameter's annotation is the input model; its JSON schema is what the model is offered. A second
  parameter, if any, receives the call's :class:`~agentbus_redis.tools.tool.ToolContext`.
* The description is the ``description`` argument, else the function's docstring.
* The return value is the result: a ``str`` as is; a pydantic model, dict, list or number as JSON (the
  structured copy kept as ``toolUseResult``); a :class:`~agentbus_redis.tools.tool.ToolOutput` for full
  control (images, ``is_error``). Raise :class:`~agentbus_redis.tools.tool.ToolError` for an error the model
  should read.
* Progress: write the function as an async generator — every :class:`~agentbus_redis.tools.tool.ToolProgress`
  (or dict, its data) it yields is reported as it happens; the first other value it yields is the result.
"""

from __future__ import annotations

import inspect
import json
import re
import typing
from collections.abc import AsyncIterator, Callable
from typing import Any, overload

from pydantic import BaseModel

from agentbus_redis.errors import AgentbusError
from agentbus_redis.json_types import JsonValue
from agentbus_redis.tools.tool import InterruptBehavior, Tool, ToolContext, ToolOutput, ToolProgress

TOOL_NAME = re.compile(r"^[a-zA-Z0-9_-]{1,64}$")
"""What the Messages API accepts as a tool name (M1.8)."""
PROGRESS_TYPE = "tool_progress"
"""The ``type`` of a progress dict that names none."""

ToolFunction = Callable[..., Any]


class ToolDefinitionError(AgentbusError, TypeError):
    """A function that cannot be made a tool (no input model, a bad name …): says which and why."""


def tool_name_problem(name: str) -> str | None:
    """Why ``name`` cannot be a tool's name, or None."""
    if TOOL_NAME.fullmatch(name) is None:
        return f"tool name {name!r} must be 1-64 letters, digits, '_' or '-'"
    return None


class FunctionTool(Tool[BaseModel]):
    """A :class:`Tool` around an async function (made by :func:`tool`; see the module docstring)."""

    def __init__(
        self,
        function: ToolFunction,
        *,
        name: str | None = None,
        description: str | None = None,
        read_only: bool = False,
        concurrency_safe: bool | None = None,
        runs_again_harmlessly: bool | None = None,
        interrupt: InterruptBehavior = "block",
        timeout_s: float | None = None,
    ) -> None:
        label = getattr(function, "__qualname__", repr(function))
        if not (inspect.iscoroutinefunction(function) or inspect.isasyncgenfunction(function)):
            raise ToolDefinitionError(f"{label}: a tool function must be `async def`")
        self.function = function
        self.name = name or function.__name__
        if (problem := tool_name_problem(self.name)) is not None:
            raise ToolDefinitionError(f"{label}: {problem}")
        self.input_model, self._takes_context = _signature(function, label)
        self._description = inspect.cleandoc(description or function.__doc__ or "")
        self._read_only = read_only
        self._concurrency_safe = read_only if concurrency_safe is None else concurrency_safe
        self._runs_again_harmlessly = read_only if runs_again_harmlessly is None else runs_again_harmlessly
        if interrupt not in ("block", "cancel"):
            raise ToolDefinitionError(f"{label}: interrupt must be 'block' or 'cancel', not {interrupt!r}")
        self._interrupt: InterruptBehavior = interrupt
        if timeout_s is not None and timeout_s <= 0:
            raise ToolDefinitionError(f"{label}: timeout_s must be positive, not {timeout_s!r}")
        self.timeout_s = timeout_s
        self.__doc__ = function.__doc__
        self.__wrapped__ = function

    def description(self) -> str:
        return self._description

    def is_read_only(self, tool_input: BaseModel) -> bool:
        return self._read_only

    def is_concurrency_safe(self, tool_input: BaseModel) -> bool:
        return self._concurrency_safe

    def runs_again_harmlessly(self, tool_input: BaseModel) -> bool:
        return self._runs_again_harmlessly

    def interrupt_behavior(self) -> InterruptBehavior:
        return self._interrupt

    async def call(self, tool_input: BaseModel, ctx: ToolContext) -> AsyncIterator[ToolProgress | ToolOutput]:
        arguments = (tool_input, ctx) if self._takes_context else (tool_input,)
        if not inspect.isasyncgenfunction(self.function):
            yield tool_output(await self.function(*arguments))
            return
        events = self.function(*arguments)
        try:
            async for event in events:
                if isinstance(event, ToolProgress):
                    yield event
                elif isinstance(event, dict):
                    yield ToolProgress({"type": PROGRESS_TYPE, **event})
                else:
                    yield tool_output(event)
                    return
        finally:
            await events.aclose()
        raise ToolDefinitionError(f"{self.name}: the tool's generator ended without yielding a result")

    async def __call__(self, *arguments: Any) -> Any:
        """The function itself (a tool stays callable as written, for tests and direct use)."""
        return await self.function(*arguments)


def _signature(function: ToolFunction, label: str) -> tuple[type[BaseModel], bool]:
    """The input model (the first parameter's annotation) and whether a second parameter takes the context."""
    parameters = list(inspect.signature(function).parameters.values())
    if not parameters or len(parameters) > 2:
        raise ToolDefinitionError(f"{label}: a tool function takes (input) or (input, ctx), typed by a pydantic model")
    try:
        hints = typing.get_type_hints(function)
    except Exception as error:  # a name the annotations use is not importable where the function lives
        raise ToolDefinitionError(f"{label}: cannot read its type annotations: {error}") from error
    model = hints.get(parameters[0].name)
    if not (isinstance(model, type) and issubclass(model, BaseModel)):
        raise ToolDefinitionError(
            f"{label}: the first parameter ({parameters[0].name}) must be annotated with a pydantic model"
        )
    return model, len(parameters) == 2


def tool_output(value: object) -> ToolOutput:
    """A tool function's return value as the call's result (see the module docstring)."""
    if isinstance(value, ToolOutput):
        return value
    if isinstance(value, str):
        return ToolOutput(value, tool_use_result=value)
    structured: JsonValue
    if isinstance(value, BaseModel):
        structured = value.model_dump(mode="json")
    elif value is None or isinstance(value, dict | list | int | float | bool):
        structured = value  # a JSON value (json.dumps below refuses what is not)
    else:
        raise ToolDefinitionError(f"a tool returned {type(value).__name__}: return a str, JSON, a model or ToolOutput")
    return ToolOutput(json.dumps(structured, ensure_ascii=False), tool_use_result=structured)


@overload
def tool(function: ToolFunction, /) -> FunctionTool: ...


@overload
def tool(
    *,
    name: str | None = None,
    description: str | None = None,
    read_only: bool = False,
    concurrency_safe: bool | None = None,
    runs_again_harmlessly: bool | None = None,
    interrupt: InterruptBehavior = "block",
    timeout_s: float | None = None,
) -> Callable[[ToolFunction], FunctionTool]: ...


def tool(
    function: ToolFunction | None = None,
    /,
    *,
    name: str | None = None,
    description: str | None = None,
    read_only: bool = False,
    concurrency_safe: bool | None = None,
    runs_again_harmlessly: bool | None = None,
    interrupt: InterruptBehavior = "block",
    timeout_s: float | None = None,
) -> FunctionTool | Callable[[ToolFunction], FunctionTool]:
    """Make an async function a tool (``@tool`` or ``@tool(...)``).

    ``name``: what the model calls it (default: the function's name). ``description``: what the model is told
    it does (default: the docstring). ``read_only``: it changes nothing (permission rules treat it as a read;
    also the default of the next two). ``concurrency_safe``: may run beside other safe calls of a reply (R8.5).
    ``runs_again_harmlessly``: a call re-run after its worker died may run it twice; otherwise it runs at most
    once and a re-run answers with the missing-result placeholder. ``interrupt``: ``cancel`` stops a running
    call on a user interrupt, ``block`` lets it finish (R8.9). ``timeout_s``: its time limit per call (default:
    the worker's).
    """

    def make(wrapped: ToolFunction) -> FunctionTool:
        return FunctionTool(
            wrapped,
            name=name,
            description=description,
            read_only=read_only,
            concurrency_safe=concurrency_safe,
            runs_again_harmlessly=runs_again_harmlessly,
            interrupt=interrupt,
            timeout_s=timeout_s,
        )

    return make if function is None else make(function)
