"""``agentbus usage SESSION``: a session's model usage and cost (M10.5), per model and in total.

The table is built from a :class:`~agentbus_redis.model.usage_totals.SessionUsage`, which may also be the sum of
several sessions (:func:`~agentbus_redis.model.usage_totals.combine_usage`: a session and its sub-agents'), so a
tree view prints with :func:`usage_lines` too.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Annotated

import typer

from agentbus_redis.cli.common import checked_session_id, fail

if TYPE_CHECKING:
    from agentbus_redis.model.usage_totals import ModelUsage, SessionUsage
    from agentbus_redis.sdk.client import AgentbusClient

COLUMNS = ("requests", "input", "output", "cache write 5m", "cache write 1h", "cache read", "cost (USD)")


def usage_command(
    session: Annotated[str, typer.Argument(help="Session id.", callback=checked_session_id)],
    raw: Annotated[bool, typer.Option("--json", help="Print the usage as JSON (snake_case, as stored).")] = False,
    tree: Annotated[
        bool, typer.Option("--tree", help="Add up SESSION and every sub-agent session it started (A5), and list them.")
    ] = False,
) -> None:
    """Print SESSION's model usage and cost per model (input, output, cache writes 5 min / 1 h, cache reads,
    requests, USD) and the date of the price table the calls were priced with; exit 1 when the bus has never
    seen SESSION."""

    async def run() -> None:
        from agentbus_redis.cli.bus import _connect, _known_session, _no_session

        async with _connect() as bus:
            usage = await (bus.tree_usage(session) if tree else bus.usage(session))
            if usage.empty and not await _known_session(bus, session):
                fail(_no_session(session))
            lines = usage_lines(usage)
            if tree and not raw:
                lines += await _tree_lines(bus, session)
        typer.echo(usage.model_dump_json(indent=2) if raw else "\n".join(lines))

    asyncio.run(run())


async def _tree_lines(bus: AgentbusClient, session: str) -> list[str]:
    """Each session of the tree with its own total tokens and cost (children indented under parents)."""
    from agentbus_redis.subagents.tree import describe_node, walk

    lines = ["sessions:"]
    for depth, node in walk(await bus.session_tree(session)):
        total = (await bus.usage(node.session_id)).total
        tokens = total.input_tokens + total.output_tokens
        tokens += total.cache_creation_5m_input_tokens + total.cache_creation_1h_input_tokens
        tokens += total.cache_read_input_tokens
        lines.append(f"{'  ' * (depth + 1)}{describe_node(node)}  {tokens:,} tokens  ${total.cost_usd:.6f}")
    return lines


def _row(name: str, usage: ModelUsage) -> list[str]:
    cost = f"{usage.cost_usd:.6f}" + ("*" if usage.unpriced_requests else "")
    counts = (
        usage.requests,
        usage.input_tokens,
        usage.output_tokens,
        usage.cache_creation_5m_input_tokens,
        usage.cache_creation_1h_input_tokens,
        usage.cache_read_input_tokens,
    )
    return [name, *(f"{count:,}" for count in counts), cost]


def usage_lines(usage: SessionUsage) -> list[str]:
    """The table ``agentbus usage`` prints: a heading, one row per model, the total, then notes (unpriced
    calls, web searches, the price tables used)."""
    sessions = usage.sessions if len(usage.sessions) > 1 else [usage.session_id]
    heading = f"session {usage.session_id}" + (f" (+{len(sessions) - 1} sub-sessions)" if len(sessions) > 1 else "")
    if usage.empty:
        return [heading, "no model calls recorded"]
    rows = [["model", *COLUMNS]]
    rows += [_row(model, model_usage) for model, model_usage in usage.models.items()]
    rows.append(_row("total", usage.total))
    widths = [max(len(row[column]) for row in rows) for column in range(len(rows[0]))]
    lines = [heading]
    for row in rows:
        cells = [row[0].ljust(widths[0]), *(cell.rjust(width) for cell, width in zip(row[1:], widths[1:], strict=True))]
        lines.append("  ".join(cells).rstrip())
    lines += _notes(usage)
    return lines


def _notes(usage: SessionUsage) -> list[str]:
    notes = []
    unpriced = [(model, calls.unpriced_requests) for model, calls in usage.models.items() if calls.unpriced_requests]
    for model, calls in unpriced:
        notes.append(f"* {calls} call(s) of {model} had no price in the price table (counted as $0)")
    total = usage.total
    if total.web_search_requests or total.web_fetch_requests:
        notes.append(
            f"server tools: {total.web_search_requests:,} web searches (in the cost), "
            f"{total.web_fetch_requests:,} web fetches"
        )
    if usage.price_tables:
        tables = ", ".join(f"{as_of} ({calls:,} calls)" for as_of, calls in usage.price_tables.items())
        notes.append(f"priced with the price table of {tables}")
    return notes
