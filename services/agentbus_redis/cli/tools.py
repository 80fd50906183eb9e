"""``agentbus tools``: the tool catalog — which tool workers are live, the pool each serves, what each can run,
when it last said so.

Only typer and the standard library at import; the client loads inside the command. Redis errors go to the
CLI's error boundary (cli/errors.py). Read-only: listing never prunes expired entries.
"""

from __future__ import annotations

import asyncio
import json
from typing import TYPE_CHECKING, Annotated

import typer

if TYPE_CHECKING:
    from agentbus_redis.stores.tool_catalog import CatalogSnapshot

app = typer.Typer(name="tools", help="The tools the live tool workers offer the model.", no_args_is_help=True)


def _seconds(milliseconds: int) -> str:
    return f"{max(milliseconds, 0) / 1000:.1f}s"


@app.command("ls")
def tools_ls(
    as_json: Annotated[
        bool, typer.Option("--json", help="Print workers, the merged tool definitions and invalid fields as JSON.")
    ] = False,
) -> None:
    """List the live tool workers, the pool each serves, the tools each can run and how long ago it last refreshed
    its entry."""
    from agentbus_redis.sdk.client import AgentbusClient
    from agentbus_redis.stores.tool_catalog import read_catalog_snapshot, snapshot_json

    async def run() -> CatalogSnapshot:
        async with AgentbusClient.connect() as bus:
            return await read_catalog_snapshot(bus.redis, bus.topology)

    snapshot = asyncio.run(run())
    if as_json:
        typer.echo(json.dumps(snapshot_json(snapshot), ensure_ascii=False))
        return
    for invalid in snapshot.invalid:
        typer.echo(f"agentbus: catalog field {invalid.worker!r} is not a tool catalog entry: {invalid.error}", err=True)
    if not snapshot.live:
        typer.echo("agentbus: no live tool workers", err=True)
        return
    width = max(len("worker"), *(len(entry.worker) for entry in snapshot.live))
    pools = max(len("pool"), *(len(entry.pool) for entry in snapshot.live))
    typer.echo(f"{'worker':<{width}} {'pool':<{pools}} {'refreshed':>10} {'expires in':>10}  tools")
    for entry in snapshot.live:
        refreshed = f"{_seconds(snapshot.now_ms - entry.refreshed_ms)} ago"
        tools = ", ".join(sorted(tool.name for tool in entry.tools))
        expires = _seconds(entry.expires_ms - snapshot.now_ms)
        typer.echo(f"{entry.worker:<{width}} {entry.pool:<{pools}} {refreshed:>10} {expires:>10}  {tools}")
    servers = [(entry.worker, server) for entry in snapshot.live for server in entry.mcp_servers]
    if servers:
        typer.echo(f"{'worker':<{width}} {'MCP server':<16} {'transport':<9} {'state':<11} tools / error")
        for worker, server in servers:
            marks = "".join(
                (
                    " [required]" if server.required else "",
                    " [per-session]" if server.per_session else "",
                    " [sandboxed]" if server.sandboxed else "",
                )
            )
            detail = f"{len(server.tools)} tools" if server.state == "connected" else server.error
            typer.echo(f"{worker:<{width}} {server.name + marks:<16} {server.transport:<9} {server.state:<11} {detail}")
    offered = snapshot.tools()
    workers = len(snapshot.live)
    typer.echo(
        f"{workers} worker{'s' if workers != 1 else ''}; the model is offered {len(offered)} "
        f"tool{'s' if len(offered) != 1 else ''}: {', '.join(tool.name for tool in offered)}"
    )
