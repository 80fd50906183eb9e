"""A team's tools as a plain module, loaded by ``agentbus worker tools --tools tests.integration.team_tools:tools``
(issue 29). ``hold`` waits for a file, so a test can kill its worker while it runs."""

from __future__ import annotations

import asyncio
from pathlib import Path

from pydantic import Field

from agentbus_redis.sdk import ToolInput, tool


class CityInput(ToolInput):
    city: str = Field(description="The city to report on")


@tool(read_only=True)
async def forecast(args: CityInput) -> str:
    """Tomorrow's weather of a city."""
    return f"Sunny in {args.city}"


class HoldInput(ToolInput):
    marker: str = Field(description="Absolute path of a file to create when the call starts")
    release: str = Field(description="Absolute path of a file whose existence ends the call")


@tool(read_only=True, timeout_s=60)
async def hold(args: HoldInput) -> str:
    """Waits until the release file exists (read-only: a call re-run after its worker died runs again)."""
    Path(args.marker).write_text("started\n")
    while not Path(args.release).exists():
        await asyncio.sleep(0.05)
    return f"released after {Path(args.marker).name}"


tools = [forecast, hold]
