"""``agentbus agents stop``: stop a running sub-agent (agent-loop.md A8.3).

A background agent survives its parent's interrupt and is stopped only explicitly; its parent then gets a
``<task-notification>`` with ``status: killed`` and the partial result (A5.4). A foreground agent's stop
answers its parent's call with the rejection (A8.2). Only typer and the standard library load before a
command runs.
"""

from __future__ import annotations

import asyncio
from typing import Annotated

import typer

from agentbus_redis.cli.common import fail

app = typer.Typer(name="agents", help="Stop sub-agents.", no_args_is_help=True)


@app.callback()
def agents_app() -> None:
    """Sub-agents started by Agent calls (`agentbus tail SESSION --tree` lists them)."""


@app.command("stop")
def stop_command(
    agent: Annotated[str, typer.Argument(help="The sub-agent: its child session id or its agentId.")],
) -> None:
    """Stop a running sub-agent; its parent is told (a background agent's as `status: killed`)."""
    from agentbus_redis.sdk.client import AgentbusClient
    from agentbus_redis.subagents.stop import AgentNotStoppable

    async def run() -> str:
        async with AgentbusClient.connect() as bus:
            try:
                stopped = await bus.stop_agent(agent)
            except AgentNotStoppable as error:
                fail(str(error))
            return f'agentbus: stopping {stopped.session_id} (agent {stopped.agent_id}: "{stopped.description}")'

    typer.echo(asyncio.run(run()))
