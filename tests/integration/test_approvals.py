"""Issue 19 §H: human approval of tool calls, end to end — real Redis, real ingestion, tool and transcript
worker processes; the model's side is played through the SDK (``send_assistant`` with tool_use blocks).

``AGENTBUS_TOOLS__ASK_POLICY=approve``: a Bash command no rule allows asks; the tool worker parks it (no slot
held), a person answers through the SDK, ingestion releases the call once. Each tool run appends one byte to
a file of the workspace, so "ran exactly once" is read off the file.
"""

from __future__ import annotations

import asyncio
import json
import urllib.request
import uuid
from pathlib import Path
from typing import Any

import pytest

from agentbus_redis.approvals.records import (
    ApprovalAnswer,
    ApprovalContinuation,
    ApprovalDecision,
    ApprovalRequested,
    AskedCall,
)
from agentbus_redis.bus.events import parse_tool_job
from agentbus_redis.messages.constants import (
    INTERRUPT_MESSAGE_FOR_TOOL_USE,
    REJECT_MESSAGE,
    REJECT_MESSAGE_WITH_REASON_PREFIX,
    SUBAGENT_REJECT_MESSAGE_WITH_REASON_PREFIX,
    SYNTHETIC_TOOL_RESULT_PLACEHOLDER,
    USER_REJECTED_TOOL_USE,
)
from agentbus_redis.messages.content import TextBlock, ToolUseBlock
from agentbus_redis.messages.factories import create_assistant_message
from agentbus_redis.messages.kinds import UserMessage
from agentbus_redis.model.session_config import SessionModelConfig
from agentbus_redis.runtime.codec import entry_fields
from agentbus_redis.stores.approvals import ApprovalStore
from agentbus_redis.streams.deadletter import list_dead_letters
from agentbus_redis.streams.entries import id_text
from agentbus_redis.streams.names import dead_letter_stream
from agentbus_redis.streams.topology import TOOLS_GROUP
from tests.cli.process import Outcome, agentbus, cli_env
from tests.conftest import ON_EVERY_TARGET
from tests.integration.approval_helpers import (
    APPROVE_ENV,
    counting_call,
    new_session,
    pending_for,
    ran,
    reply_with,
    result_block,
    result_for,
    results,
    transcript_result,
)
from tests.integration.cluster import WorkerCluster, eventually

pytestmark = [pytest.mark.integration, pytest.mark.slow, ON_EVERY_TARGET]


@pytest.fixture(scope="module")
def bus_workers(module_cluster: WorkerCluster) -> WorkerCluster:
    module_cluster.extra_env.update(APPROVE_ENV)
    for name in ("ingestion", "tools", "transcripts"):
        module_cluster.start(name)
    module_cluster.wait_ready()
    return module_cluster


async def test_h4_allowed_call_runs_exactly_once_and_the_transcript_has_its_result(bus_workers: WorkerCluster) -> None:
    session, file = new_session(), f"{uuid.uuid4().hex[:6]}.txt"
    call = counting_call("allow", file)
    async with bus_workers.client() as bus:
        await reply_with(bus, session, call)
        (req,) = await pending_for(bus, session)
        # H4.2: the request carries the call as the model sent it, and what "always allow" would add.
        assert (req.tool_name, req.input, req.request.tool_use_id) == ("Bash", call.input, call.id)
        assert req.request.agent_id is None
        assert req.request.permission_suggestions == [
            {
                "type": "addRules",
                "rules": [{"toolName": "Bash", "ruleContent": f"printf x >> {file}"}],
                "behavior": "allow",
                "destination": "localSettings",
            }
        ]
        assert ran(bus_workers, file) == ""
        await req.allow()
        await req.allow()  # a second answer is ignored (H4.4)
        message = await result_for(bus, session, call.id)
        assert result_block(message).is_error is None
        assert await bus.pending_approvals(session) == []
        stored = await ApprovalStore(bus.redis, bus.topology).get(session, req.approval_id)
        assert stored is not None
        assert stored.decision is not None
        assert stored.decision.outcome == "allowed"
    assert ran(bus_workers, file) == "x"
    block, _ = await transcript_result(bus_workers, session, call.id)
    assert "is_error" not in block
    (tools,) = bus_workers.of("tools")
    with urllib.request.urlopen(f"http://127.0.0.1:{tools.port}/metrics", timeout=5) as reply:
        exposed = reply.read().decode()
    assert 'agentbus_approval_decisions_total{outcome="allowed",tool="Bash"}' in exposed
    assert 'agentbus_approval_decision_seconds_count{outcome="allowed"}' in exposed
    assert 'agentbus_approvals_requested_total{tool="Bash"}' in exposed
    assert "agentbus_approvals_pending " in exposed


async def test_h4_updated_input_and_h5_3_feedback(bus_workers: WorkerCluster) -> None:
    session, file = new_session(), f"{uuid.uuid4().hex[:6]}.txt"
    call = counting_call("edit", file)
    async with bus_workers.client() as bus:
        await reply_with(bus, session, call)
        (req,) = await pending_for(bus, session)
        await req.allow(updated_input={"command": f"printf yy >> {file}"}, message="  used yy instead  ")
        message = await result_for(bus, session, call.id)
        # H5.3: the trimmed feedback is a text block after the tool_result, in the same message.
        assert isinstance(message.blocks[-1], TextBlock)
        assert message.blocks[-1].text == "used yy instead"
    assert ran(bus_workers, file) == "yy"


async def test_h5_denied_call_gets_the_exact_rejection_texts(bus_workers: WorkerCluster) -> None:
    session, file = new_session(), f"{uuid.uuid4().hex[:6]}.txt"
    plain, commented = counting_call("deny", file), counting_call("deny_comment", file)
    async with bus_workers.client() as bus:
        await reply_with(bus, session, plain, commented)
        # Two unsafe calls: R8.5 runs them one after the other, so the second waits behind the first.
        (first,) = await pending_for(bus, session)
        await first.deny()
        denied = await result_for(bus, session, plain.id)
        assert result_block(denied).content == REJECT_MESSAGE
        assert result_block(denied).is_error is True
        assert denied.tool_use_result == f"Error: {REJECT_MESSAGE}"
        (second,) = await pending_for(bus, session)
        assert second.request.tool_use_id == commented.id
        await second.deny(message="use the staging database")
        text = result_block(await result_for(bus, session, commented.id)).content
        assert text == REJECT_MESSAGE_WITH_REASON_PREFIX + "use the staging database"
    # The transcript (JSONL) has the exact H5 texts.
    block, tool_use_result = await transcript_result(bus_workers, session, plain.id)
    assert (block["content"], block["is_error"], tool_use_result) == (REJECT_MESSAGE, True, f"Error: {REJECT_MESSAGE}")
    block, _ = await transcript_result(bus_workers, session, commented.id)
    assert block["content"] == REJECT_MESSAGE_WITH_REASON_PREFIX + "use the staging database"
    assert ran(bus_workers, file) == ""


async def test_r8_5_later_batch_waits_for_the_asking_call(bus_workers: WorkerCluster) -> None:
    """A safe Read after an asking Bash is a later batch: it must not run (or answer) before the Bash is
    decided; the Glob before it runs at once."""
    session, file = new_session(), f"{uuid.uuid4().hex[:6]}.txt"
    (bus_workers.workspace / "note.md").write_text("hello")
    before = ToolUseBlock(id=f"toolu_glob_{uuid.uuid4().hex[:8]}", name="Glob", input={"pattern": "*.md"})
    asking = counting_call("ordered", file)
    after = ToolUseBlock(id=f"toolu_read_{uuid.uuid4().hex[:8]}", name="Read", input={"file_path": "note.md"})
    async with bus_workers.client() as bus:
        await reply_with(bus, session, before, asking, after)
        (req,) = await pending_for(bus, session)
        await result_for(bus, session, before.id)
        assert after.id not in await results(bus, session)
        await req.allow()
        await result_for(bus, session, after.id)
        order = [getattr(entry.message, "uuid", None) for entry in await bus.history(session)]
        answered = await results(bus, session)
        assert order.index(answered[asking.id].uuid) < order.index(answered[after.id].uuid)


async def test_h6_deny_with_interrupt_aborts_the_turn(bus_workers: WorkerCluster) -> None:
    session, file = new_session(), f"{uuid.uuid4().hex[:6]}.txt"
    asking, later = counting_call("abort", file), counting_call("later", file)
    async with bus_workers.client() as bus:
        await reply_with(bus, session, asking, later)
        (req,) = await pending_for(bus, session)
        await req.deny(interrupt=True)
        assert result_block(await result_for(bus, session, asking.id)).content == REJECT_MESSAGE
        tail = await result_for(bus, session, later.id)  # never started: R8.9's interrupt text
        assert result_block(tail).content == REJECT_MESSAGE
        assert tail.tool_use_result == USER_REJECTED_TOOL_USE

        async def interrupted() -> bool:
            return any(
                isinstance(e.message, UserMessage)
                and any(isinstance(b, TextBlock) and b.text == INTERRUPT_MESSAGE_FOR_TOOL_USE for b in e.message.blocks)
                for e in await bus.history(session)
            )

        await eventually(interrupted, timeout_s=30)
    assert ran(bus_workers, file) == ""


async def test_h6_interrupt_cancels_pending_approvals(bus_workers: WorkerCluster) -> None:
    session, file = new_session(), f"{uuid.uuid4().hex[:6]}.txt"
    call = counting_call("cancel", file)
    async with bus_workers.client() as bus:
        await reply_with(bus, session, call)
        (req,) = await pending_for(bus, session)
        await bus.interrupt(session)
        message = await result_for(bus, session, call.id)
        assert result_block(message).content == REJECT_MESSAGE
        assert message.tool_use_result == f"Error: {REJECT_MESSAGE}"
        store = ApprovalStore(bus.redis, bus.topology)

        async def cancelled() -> bool:
            stored = await store.get(session, req.approval_id)
            return stored is not None and stored.decision is not None and stored.decision.outcome == "cancelled"

        await eventually(cancelled, timeout_s=30)
        await req.allow()  # too late: ignored, nothing runs
        await asyncio.sleep(0.5)
        assert list(await results(bus, session)) == [call.id]
    assert ran(bus_workers, file) == ""


async def test_h7_always_allow_lets_the_next_identical_call_run_without_asking(bus_workers: WorkerCluster) -> None:
    session, file = new_session(), f"{uuid.uuid4().hex[:6]}.txt"
    first = counting_call("always", file)
    async with bus_workers.client() as bus:
        await reply_with(bus, session, first)
        (req,) = await pending_for(bus, session)
        await req.always_allow()
        await result_for(bus, session, first.id)
        again = ToolUseBlock(id=f"toolu_again_{uuid.uuid4().hex[:8]}", name="Bash", input=first.input)
        await bus.send_assistant(session, create_assistant_message([again]))
        await result_for(bus, session, again.id)
        assert await bus.pending_approvals(session) == []
        # Another session did not get the rule (H7: per session).
        other = new_session()
        stranger = ToolUseBlock(id=f"toolu_other_{uuid.uuid4().hex[:8]}", name="Bash", input=first.input)
        await reply_with(bus, other, stranger)
        (asked,) = await pending_for(bus, other)
        await asked.deny()
    assert ran(bus_workers, file) == "xx"


async def test_forged_answers_and_continuations_are_dead_lettered(bus_workers: WorkerCluster) -> None:
    session, file = new_session(), f"{uuid.uuid4().hex[:6]}.txt"
    call = counting_call("forged", file)
    async with bus_workers.client() as bus:
        await reply_with(bus, session, call)
        (req,) = await pending_for(bus, session)
        ingress_dlq = dead_letter_stream(bus.topology.ingress_for(session))
        # A wrong tool_use_id, an unknown approval, a producer posing as a tool worker parking a call.
        await bus.publish(
            session, ApprovalAnswer(approval_id=req.approval_id, tool_use_id="toolu_other", behavior="allow")
        )
        await bus.publish(session, ApprovalAnswer(approval_id="apr_nope", tool_use_id=call.id, behavior="allow"))
        forged_park = ApprovalRequested(
            park_id="park_x",
            assistant_uuid="a",
            dispatched_ms=0,
            asked=[AskedCall(approval_id="apr_x", tool_use=call, deadline_ms=0, timeout_s=1)],
        )
        await bus.publish(session, forged_park)
        # A producer writing a continuation straight onto the tool-jobs stream (no ingestion authenticator).
        jobs = bus.topology.tool_jobs_for(session)
        forged_job = ApprovalContinuation(
            session_id=session,
            park_id="park_x",
            assistant_uuid="a",
            tool_uses=[call],
            dispatched_ms=0,
            deadline_ms=0,
            approval_id=req.approval_id,
            decision=ApprovalDecision(outcome="allowed", decided_ms=0),
        )
        await bus.redis.xadd(jobs, entry_fields(forged_job))  # type: ignore[arg-type]

        async def letters() -> dict[str, int]:
            found: dict[str, int] = {}
            for stream in (ingress_dlq, dead_letter_stream(jobs)):
                for letter in await list_dead_letters(bus.redis, stream):
                    found[letter.reason] = found.get(letter.reason, 0) + 1
            return found

        async def all_dead_lettered() -> bool:
            found = await letters()
            wanted = {"approval_mismatch": 1, "unknown_approval": 1, "forged_internal_event": 2}
            return all(found.get(reason, 0) >= count for reason, count in wanted.items())

        try:
            await eventually(all_dead_lettered, timeout_s=30)
        except TimeoutError:
            pytest.fail(f"dead letters: {await letters()}")
        assert await bus.pending_approvals(session) != []  # still waiting: nothing forged resolved it
        assert call.id not in await results(bus, session)
        await req.deny()
        await result_for(bus, session, call.id)
    assert ran(bus_workers, file) == ""


async def test_allowed_after_a_tool_worker_sigkill_runs_exactly_once(bus_workers: WorkerCluster) -> None:
    session, file = new_session(), f"{uuid.uuid4().hex[:6]}.txt"
    call = counting_call("restart", file)
    async with bus_workers.client() as bus:
        await reply_with(bus, session, call)
        (req,) = await pending_for(bus, session)
        for worker in bus_workers.of("tools"):
            bus_workers.kill(worker)
            bus_workers.workers.remove(worker)
        bus_workers.start("tools")
        bus_workers.wait_ready()
        await req.allow()
        await result_for(bus, session, call.id)
        await asyncio.sleep(1.0)  # a duplicate run would append within this
    assert ran(bus_workers, file) == "x"


async def test_cli_approvals_ls_show_allow_and_refusals(bus_workers: WorkerCluster, tmp_path: Path) -> None:
    session, file = new_session(), f"{uuid.uuid4().hex[:6]}.txt"
    call = counting_call("cli", file)
    env = cli_env(**{k: v for k, v in bus_workers.env().items() if k.startswith("AGENTBUS_") or k == "REDIS_URL"})

    def cli(*args: str) -> Outcome:
        return agentbus("approvals", *args, cwd=tmp_path, env=env)

    async with bus_workers.client() as bus:
        await reply_with(bus, session, call)
        (req,) = await pending_for(bus, session)
        listed = await asyncio.to_thread(cli, "ls", "--session", session)
        assert listed.code == 0, listed.stderr
        assert req.approval_id in listed.stdout
        assert "Bash" in listed.stdout
        shown = await asyncio.to_thread(cli, "show", req.approval_id)
        assert json.loads(shown.stdout)["request"]["tool_use_id"] == call.id
        assert json.loads(shown.stdout)["decision"] is None
        bad_input = await asyncio.to_thread(cli, "allow", req.approval_id, "--input", "[1]")
        assert (bad_input.code, bad_input.error_line) == (2, "agentbus: --input must be a JSON object")
        allowed = await asyncio.to_thread(
            cli, "allow", req.approval_id, "--input", json.dumps({"command": f"printf zz >> {file}"})
        )
        assert allowed.code == 0, allowed.stderr
        assert allowed.stdout.strip() == f"allowed {req.approval_id}: Bash in session {session}"
        await result_for(bus, session, call.id)

        async def decided() -> bool:
            shown = await asyncio.to_thread(cli, "show", req.approval_id)
            return json.loads(shown.stdout)["decision"] is not None

        await eventually(decided, timeout_s=30)
        again = await asyncio.to_thread(cli, "deny", req.approval_id)
        assert (again.code, again.error_line) == (
            1,
            f"agentbus: approval {req.approval_id} was already answered (allowed)",
        )
        unknown = await asyncio.to_thread(cli, "deny", "apr_nope")
        assert (unknown.code, unknown.error_line) == (1, "agentbus: no approval apr_nope")
    assert ran(bus_workers, file) == "zz"


async def test_h8_1_a_sub_agents_call_asks_through_its_parents_channel(bus_workers: WorkerCluster) -> None:
    """A child session (its config names its parent and agent id, A3) parks like any session; the request
    carries ``agent_id``, it is listed with the parent's approvals, and a deny uses the SUBAGENT_* text."""
    parent, child, file = new_session(), new_session(), f"{uuid.uuid4().hex[:6]}.txt"
    call = counting_call("subagent", file)
    async with bus_workers.client() as bus:
        config = SessionModelConfig(parent_session_id=parent, agent_id="a1b2c3", agent_type="general-purpose", depth=1)
        await bus.redis.set(bus.topology.session_config(child), config.to_wire_json())
        await reply_with(bus, child, call)
        (req,) = await pending_for(bus, parent)
        assert (req.session_id, req.request.agent_id, req.request.parent_session_id) == (child, "a1b2c3", parent)
        await req.deny(message="not from a sub-agent")
        text = result_block(await result_for(bus, child, call.id)).content
        assert text == SUBAGENT_REJECT_MESSAGE_WITH_REASON_PREFIX + "not from a sub-agent"
    assert ran(bus_workers, file) == ""


async def test_h_a_rerun_job_leaves_parked_calls_to_their_park(bus_workers: WorkerCluster) -> None:
    """A job delivered again after its calls were parked (a worker that died between parking and its ack)
    neither asks again nor runs the waiting tail: the park's continuations run each call once."""
    session, asked_file, tail_file = new_session(), f"{uuid.uuid4().hex[:6]}.txt", f"{uuid.uuid4().hex[:6]}.txt"
    asking = counting_call("rerun", asked_file)
    tail = ToolUseBlock(
        id=f"toolu_tail_{uuid.uuid4().hex[:8]}", name="Bash", input={"command": f"echo y >> {tail_file}"}
    )
    async with bus_workers.client() as bus:
        await reply_with(bus, session, asking, tail)
        (req,) = await pending_for(bus, session)
        jobs = bus.topology.tool_jobs_for(session)
        rows: Any = await bus.redis.xrange(jobs)
        jobs_of_session = [  # the stream also holds other tests' continuation jobs
            fields
            for _, fields in rows
            if json.loads(fields[b"data"])["type"] == "tool_job"
            and parse_tool_job(fields[b"data"]).session_id == session
        ]
        (job_fields,) = jobs_of_session
        again = id_text(await bus.redis.xadd(jobs, job_fields))

        async def handled() -> bool:
            pending: Any = await bus.redis.xpending_range(jobs, TOOLS_GROUP, min="-", max="+", count=100)
            info: Any = await bus.redis.xinfo_groups(jobs)
            last = next(group["last-delivered-id"] for group in info if id_text(group["name"]) == TOOLS_GROUP)
            delivered = [int(part) for part in id_text(last).split("-")] >= [int(part) for part in again.split("-")]
            return delivered and not any(id_text(p["message_id"]) == again for p in pending)

        await eventually(handled, timeout_s=30)
        assert [r.approval_id for r in await bus.pending_approvals(session)] == [req.approval_id]
        assert ran(bus_workers, tail_file) == ""
        await req.allow()
        await result_for(bus, session, tail.id)
        await asyncio.sleep(1.0)  # a duplicate run would append within this
    assert (ran(bus_workers, asked_file), ran(bus_workers, tail_file)) == ("x", "y\n")


async def test_h_an_approved_call_whose_worker_dies_is_not_run_again(bus_workers: WorkerCluster) -> None:
    """The allowed call is claimed before it runs: when its worker is SIGKILLed mid-call, the redelivered
    continuation answers with the placeholder instead of running the tool a second time."""
    session, file = new_session(), f"{uuid.uuid4().hex[:6]}.txt"
    marker = bus_workers.workspace / f"{file}.started"
    command = f"touch {marker.name} && sleep 4 && printf x >> {file}"
    call = ToolUseBlock(id=f"toolu_slow_{uuid.uuid4().hex[:8]}", name="Bash", input={"command": command})
    async with bus_workers.client() as bus:
        await reply_with(bus, session, call)
        (req,) = await pending_for(bus, session)
        await req.allow()

        async def started() -> bool:
            return marker.exists()

        await eventually(started, timeout_s=30)
        for worker in bus_workers.of("tools"):
            bus_workers.kill(worker)
            bus_workers.workers.remove(worker)
        bus_workers.start("tools")
        bus_workers.wait_ready()
        message = await result_for(bus, session, call.id)
        assert result_block(message).content == SYNTHETIC_TOOL_RESULT_PLACEHOLDER
        await asyncio.sleep(5.0)  # past the first attempt's sleep: a second run would append once more
    assert ran(bus_workers, file) in ("", "x")  # the killed worker's command may finish on its own
