"""``agentbus approvals ls|show|allow|deny``: answer tool calls waiting for a person (agent-loop.md §H).

The workers ask only with ``AGENTBUS_TOOLS__ASK_POLICY=approve``. An answer is published to the session's
ingress like any producer's entry; ingestion checks it against the parked approval and releases the call
once (a second answer is ignored, H4.4). Only typer and the standard library load before a command runs.
"""

from __future__ import annotations

import asyncio
import json
import time
from typing import TYPE_CHECKING, Annotated, Any

import typer

from agentbus_redis.cli.common import USAGE_ERROR, fail

if TYPE_CHECKING:
    from agentbus_redis.sdk.approvals import PendingApproval
    from agentbus_redis.sdk.client import AgentbusClient

app = typer.Typer(name="approvals", help="List and answer tool calls waiting for approval.", no_args_is_help=True)

ApprovalId = Annotated[str, typer.Argument(help="The approval id (`agentbus approvals ls` lists them).")]
Message = Annotated[
    str | None,
    typer.Option("--message", "-m", help="allow: feedback the model reads after the result; deny: the user's words."),
]


def _connect() -> AgentbusClient:
    from agentbus_redis.sdk.client import AgentbusClient

    return AgentbusClient.connect()


def _age(ms: int) -> str:
    seconds = max(0, int(time.time() - ms / 1000))
    return (
        f"{seconds // 3600}h{seconds % 3600 // 60:02d}m" if seconds >= 3600 else f"{seconds // 60}m{seconds % 60:02d}s"
    )


def _summary(value: Any) -> str:
    text = json.dumps(value, ensure_ascii=False)
    return text if len(text) <= 60 else text[:59] + "…"


@app.command("ls")
def ls_command(
    session: Annotated[str | None, typer.Option("--session", "-s", help="Only this session's approvals.")] = None,
) -> None:
    """The approvals waiting for an answer, oldest first."""

    async def run() -> list[Any]:
        async with _connect() as bus:
            return [req.request for req in await bus.pending_approvals(session)]

    requests = asyncio.run(run())
    if not requests:
        typer.echo("agentbus: no approvals pending", err=True)
        return
    typer.echo(f"{'approval':<28} {'session':<24} {'agent':<12} {'age':>7}  {'tool':<10} input")
    for request in requests:
        agent = request.agent_id or "-"
        age = _age(request.requested_ms)
        typer.echo(
            f"{request.approval_id:<28} {request.session_id:<24} {agent:<12} {age:>7}  "
            f"{request.tool_name:<10} {_summary(request.input)}"
        )


@app.command("show")
def show_command(approval_id: ApprovalId) -> None:
    """One approval as JSON: the request (H4.2 fields) and, once answered, its decision."""
    from agentbus_redis.sdk.approvals import find_approval

    async def run() -> None:
        async with _connect() as bus:
            stored = await find_approval(bus, approval_id)
            if stored is None:
                fail(f"no approval {approval_id}")
            body: dict[str, Any] = {"request": json.loads(stored.request.to_wire_json())}
            body["decision"] = json.loads(stored.decision.to_wire_json()) if stored.decision else None
            typer.echo(json.dumps(body, indent=2, ensure_ascii=False))

    asyncio.run(run())


async def _pending(bus: AgentbusClient, approval_id: str) -> PendingApproval:
    from agentbus_redis.sdk.approvals import PendingApproval, find_approval

    stored = await find_approval(bus, approval_id)
    if stored is None:
        fail(f"no approval {approval_id}")
    if stored.decision is not None:
        fail(f"approval {approval_id} was already answered ({stored.decision.outcome})")
    return PendingApproval(stored.request, bus)


@app.command("allow")
def allow_command(
    approval_id: ApprovalId,
    always: Annotated[
        bool, typer.Option("--always", help="Also add the suggested rule to the session: don't ask again (H7).")
    ] = False,
    input_json: Annotated[
        str | None, typer.Option("--input", metavar="JSON", help="Run the tool with this input object instead.")
    ] = None,
    message: Message = None,
) -> None:
    """Let the tool call run."""
    updated_input: dict[str, Any] | None = None
    if input_json is not None:
        try:
            updated_input = json.loads(input_json)
        except json.JSONDecodeError as error:
            fail(f"--input is not JSON: {error}", code=USAGE_ERROR)
        if not isinstance(updated_input, dict):
            fail("--input must be a JSON object", code=USAGE_ERROR)

    async def run() -> str:
        async with _connect() as bus:
            req = await _pending(bus, approval_id)
            updates = list(req.request.permission_suggestions) if always else []
            await req.allow(updated_input, updated_permissions=updates, message=message, answered_by="cli")
            return f"{req.tool_name} in session {req.session_id}"

    typer.echo(f"allowed {approval_id}: {asyncio.run(run())}")


@app.command("deny")
def deny_command(
    approval_id: ApprovalId,
    message: Message = None,
    interrupt: Annotated[bool, typer.Option("--interrupt", help="Also stop the turn, as Esc would (H6).")] = False,
) -> None:
    """Refuse the tool call; the model reads the rejection (with your message)."""

    async def run() -> str:
        async with _connect() as bus:
            req = await _pending(bus, approval_id)
            await req.deny(message, interrupt=interrupt, answered_by="cli")
            return f"{req.tool_name} in session {req.session_id}"

    typer.echo(f"denied {approval_id}: {asyncio.run(run())}")
