# weather_tools.py: run it in a pool of its own, beside the built-ins' workers:
#   agentbus worker tools --pool weather --no-builtins --tools weather_tools:tools
import asyncio

from pydantic import Field

from agentbus_redis.sdk import ToolInput, tool


class CityInput(ToolInput):
    city: str = Field(description="The city to report on")


@tool(read_only=True, timeout_s=10)
async def weather(args: CityInput) -> str:
    """Today's weather in a city."""
    return f"It is sunny in {args.city}."


tools = [weather]

if __name__ == "__main__":  # a tool stays callable as written
    print(asyncio.run(weather(CityInput(city="Oslo"))))
