"""A team's tools, shipped as a package: its ``agentbus.tools`` entry point names :data:`tools`."""

from __future__ import annotations

from pydantic import Field

from agentbus_redis.sdk import ToolInput, tool


class ShoutInput(ToolInput):
    text: str = Field(description="What to shout")


@tool(read_only=True)
async def shout(args: ShoutInput) -> str:
    """Say the text in capitals."""
    return args.text.upper() + "!"


tools = [shout]
