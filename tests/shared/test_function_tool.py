"""Issue 29, a Python tool in a few lines: ``@tool`` makes an async function a Tool (tools/function_tool.py)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest
from pydantic import BaseModel, Field

from agentbus_redis.sdk import FunctionTool, ToolContext, ToolInput, ToolOutput, tool
from agentbus_redis.tools import ToolDefinitionError, ToolProgress, tool_output

CTX = ToolContext(tool_use_id="toolu_1")


class CityInput(ToolInput):
    city: str = Field(description="The city")
    days: int = Field(1, ge=1, le=7, description="How many days")


class Forecast(BaseModel):
    city: str
    sunny: bool


@tool(read_only=True, timeout_s=5)
async def forecast(args: CityInput) -> Forecast:
    """The weather of the next days."""
    return Forecast(city=args.city, sunny=True)


@tool(name="Deploy", description="Ship it.", interrupt="cancel")
async def deploy(args: CityInput, ctx: ToolContext) -> str:
    return f"deployed to {args.city} as {ctx.tool_use_id}"


@tool
async def slow_count(args: CityInput) -> AsyncIterator[Any]:
    """Counts, reporting each step."""
    for day in range(args.days):
        yield {"day": day}
    yield ToolProgress({"type": "custom", "done": True})
    yield f"counted {args.days}"


async def run(made: FunctionTool, **tool_input: Any) -> list[ToolProgress | ToolOutput]:
    return [event async for event in made.call(made.input_model.model_validate(tool_input), CTX)]


def test_the_definition_is_the_input_models_schema_and_the_docstring() -> None:
    definition = forecast.definition()
    assert (definition.name, definition.description) == ("forecast", "The weather of the next days.")
    assert definition.input_schema == {
        "type": "object",
        "additionalProperties": False,
        "properties": {
            "city": {"type": "string", "description": "The city"},
            "days": {"type": "integer", "default": 1, "minimum": 1, "maximum": 7, "description": "How many days"},
        },
        "required": ["city"],
    }
    assert (deploy.definition().name, deploy.definition().description) == ("Deploy", "Ship it.")


def test_declared_behaviour() -> None:
    parsed = CityInput(city="Oslo")
    assert forecast.is_read_only(parsed)
    assert forecast.is_concurrency_safe(parsed)
    assert forecast.runs_again_harmlessly(parsed)  # read-only: a re-run is harmless
    assert forecast.timeout_s == 5
    assert forecast.interrupt_behavior() == "block"
    assert not deploy.is_read_only(parsed)
    assert not deploy.is_concurrency_safe(parsed)
    assert not deploy.runs_again_harmlessly(parsed)  # a side effect: at most once
    assert deploy.interrupt_behavior() == "cancel"
    assert deploy.timeout_s is None
    harmless = FunctionTool(deploy.function, name="Again", runs_again_harmlessly=True)
    assert harmless.runs_again_harmlessly(parsed)
    assert not harmless.is_read_only(parsed)


async def test_a_returned_model_is_json_with_its_structured_copy() -> None:
    assert await run(forecast, city="Oslo") == [
        ToolOutput('{"city": "Oslo", "sunny": true}', tool_use_result={"city": "Oslo", "sunny": True})
    ]


async def test_the_context_reaches_a_second_parameter() -> None:
    assert await run(deploy, city="Oslo") == [
        ToolOutput("deployed to Oslo as toolu_1", tool_use_result=("deployed to Oslo as toolu_1"))
    ]


async def test_a_generator_reports_progress_then_its_first_other_value_is_the_result() -> None:
    events = await run(slow_count, city="x", days=2)
    assert events == [
        ToolProgress({"type": "tool_progress", "day": 0}),
        ToolProgress({"type": "tool_progress", "day": 1}),
        ToolProgress({"type": "custom", "done": True}),
        ToolOutput("counted 2", tool_use_result="counted 2"),
    ]


async def test_the_decorated_function_stays_callable() -> None:
    assert await forecast(CityInput(city="Rome")) == Forecast(city="Rome", sunny=True)


def test_return_values_become_results() -> None:
    assert tool_output([1, "a"]) == ToolOutput('[1, "a"]', tool_use_result=[1, "a"])
    assert tool_output(None) == ToolOutput("null", tool_use_result=None)
    error = ToolOutput("bad", is_error=True)
    assert tool_output(error) is error
    with pytest.raises(ToolDefinitionError, match="return a str"):
        tool_output(object())


def test_functions_that_cannot_be_tools_say_why() -> None:
    def not_async(args: CityInput) -> str:
        return ""

    async def untyped(args):  # type: ignore[no-untyped-def]
        return ""

    async def too_many(args: CityInput, ctx: ToolContext, extra: int) -> str:
        return ""

    with pytest.raises(ToolDefinitionError, match="must be `async def`"):
        tool(not_async)
    with pytest.raises(ToolDefinitionError, match="annotated with a pydantic model"):
        tool(untyped)
    with pytest.raises(ToolDefinitionError, match=r"takes \(input\) or \(input, ctx\)"):
        tool(too_many)
    with pytest.raises(ToolDefinitionError, match="tool name 'has space'"):
        tool(name="has space")(forecast.function)
    with pytest.raises(ToolDefinitionError, match="timeout_s must be positive"):
        tool(timeout_s=0)(forecast.function)
