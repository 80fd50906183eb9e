"""execute_tool_uses (spec §8): R8.1 result shapes and texts, R8.3 progress, R8.4/R8.5 partition and
concurrency, R8.9 interrupts, R8.10 Bash sibling-error cancellation, timeouts."""

from __future__ import annotations

import asyncio
import os
import uuid
from collections import defaultdict
from collections.abc import AsyncIterator, Sequence
from pathlib import Path
from typing import Any

import pytest

from agentbus_redis.bus.interrupts import InterruptReason
from agentbus_redis.clock import FixedClock
from agentbus_redis.ids import SequentialIds
from agentbus_redis.messages.constants import (
    REJECT_MESSAGE,
    SUBAGENT_REJECT_MESSAGE,
    USER_REJECTED_TOOL_USE,
    dont_ask_reject_message,
)
from agentbus_redis.messages.content import ToolResultBlock, ToolUseBlock
from agentbus_redis.messages.kinds import ProgressMessage, UserMessage
from agentbus_redis.permissions.decide import PermissionContext
from agentbus_redis.sandbox.runner import Sandbox
from agentbus_redis.tools.tool import (
    AnyTool,
    InterruptBehavior,
    Tool,
    ToolContext,
    ToolError,
    ToolInput,
    ToolOutput,
    ToolProgress,
)
from agentbus_redis.workers.tools import results
from agentbus_redis.workers.tools.builtin import BashTool, ReadTool, WriteTool, builtin_tools
from agentbus_redis.workers.tools.builtin.edit import EditTool
from agentbus_redis.workers.tools.executor import ToolInterrupt, ToolTimeouts, execute_tool_uses, plan_batches
from agentbus_redis.workers.tools.registry import DuplicateToolName, ToolRegistry, default_registry
from agentbus_redis.workers.tools.workspace import Workspace

ASSISTANT_UUID = "aaaaaaaa-0000-4000-8000-000000000001"


# --- a controllable test tool -------------------------------------------------------------------


class Gates:
    """Named events shared by the test tools, plus a live-concurrency tracker."""

    def __init__(self) -> None:
        self.events: defaultdict[str, asyncio.Event] = defaultdict(asyncio.Event)
        self.active = 0
        self.max_active = 0
        self.release_at: int | None = None

    def __getitem__(self, name: str) -> asyncio.Event:
        return self.events[name]


class GateInput(ToolInput):
    label: str
    wait_for: str | None = None
    opens: str | None = None
    fail: str | None = None
    crash: str | None = None
    forever: bool = False
    progress: int = 0


class GateTool(Tool[GateInput]):
    input_model = GateInput

    def __init__(
        self, gates: Gates, *, name: str = "Gate", safe: bool = True, interrupt: InterruptBehavior = "block"
    ) -> None:
        self.name = name
        self.gates = gates
        self.safe = safe
        self.interrupt = interrupt

    def is_concurrency_safe(self, tool_input: GateInput) -> bool:
        return self.safe

    def is_read_only(self, tool_input: GateInput) -> bool:
        return True

    def interrupt_behavior(self) -> InterruptBehavior:
        return self.interrupt

    async def call(self, tool_input: GateInput, ctx: ToolContext) -> AsyncIterator[ToolProgress | ToolOutput]:
        gates = self.gates
        gates.active += 1
        gates.max_active = max(gates.max_active, gates.active)
        try:
            gates[f"started:{tool_input.label}"].set()
            if gates.release_at is not None:
                if gates.active >= gates.release_at:
                    gates["release"].set()
                await gates["release"].wait()
            for index in range(tool_input.progress):
                yield ToolProgress({"type": "gate_progress", "step": index})
            if tool_input.wait_for:
                await gates[tool_input.wait_for].wait()
            if tool_input.forever:
                await asyncio.Event().wait()
            if tool_input.fail:
                raise ToolError(tool_input.fail)
            if tool_input.crash:
                raise RuntimeError(tool_input.crash)
            if tool_input.opens:
                gates[tool_input.opens].set()
        finally:
            gates.active -= 1
        yield ToolOutput(f"done {tool_input.label}", tool_use_result={"label": tool_input.label})


class FlakySafety(GateTool):
    def is_concurrency_safe(self, tool_input: GateInput) -> bool:
        raise ValueError("cannot tell")


# --- helpers ------------------------------------------------------------------------------------


@pytest.fixture
def workspace(tmp_path: Path) -> Workspace:
    return Workspace.at(tmp_path)


@pytest.fixture(params=["unsandboxed", "sandboxed"])
def bash_sandbox(request: pytest.FixtureRequest, workspace: Workspace) -> Sandbox | None:
    """The Bash tests run unsandboxed and in the worker's sandbox (processes found by a marker then: a
    sandboxed command's pids are its own namespace's)."""
    if request.param == "unsandboxed":
        return None
    sandbox = Sandbox.for_this_process()
    if sandbox.owner is not None:
        os.chown(workspace.root, *sandbox.owner)
    return sandbox


def sleeper() -> tuple[str, str]:
    marker = f"30.{uuid.uuid4().int % 10**9:09d}"
    return f"sleep {marker}", marker


def use(tool_id: str, name: str, **tool_input: Any) -> ToolUseBlock:
    return ToolUseBlock(id=tool_id, name=name, input=tool_input)


def gate(tool_id: str, name: str = "Gate", **tool_input: Any) -> ToolUseBlock:
    return use(tool_id, name, label=tool_id, **tool_input)


def permissive(workspace: Workspace | None = None, **kwargs: Any) -> PermissionContext:
    root = str(workspace.root) if workspace else "/ws"
    return PermissionContext(workspace_root=root, mode=kwargs.pop("mode", "bypassPermissions"), **kwargs)


async def collect(
    blocks: Sequence[ToolUseBlock],
    tools: Sequence[AnyTool],
    *,
    permissions: PermissionContext | None = None,
    **options: Any,
) -> list[ProgressMessage | UserMessage]:
    return [
        message
        async for message in execute_tool_uses(
            blocks,
            assistant_uuid=ASSISTANT_UUID,
            registry=ToolRegistry(tools),
            permissions=permissions or permissive(),
            clock=FixedClock(),
            ids=SequentialIds(),
            **options,
        )
    ]


def result(message: ProgressMessage | UserMessage) -> ToolResultBlock:
    assert isinstance(message, UserMessage)
    block = message.blocks[0]
    assert isinstance(block, ToolResultBlock)
    return block


def results_by_id(messages: Sequence[ProgressMessage | UserMessage]) -> dict[str, ToolResultBlock]:
    found = [result(message) for message in messages if isinstance(message, UserMessage)]
    assert len({block.tool_use_id for block in found}) == len(found), "one result per tool_use"
    return {block.tool_use_id: block for block in found}


def order(messages: Sequence[ProgressMessage | UserMessage]) -> list[str]:
    return [result(message).tool_use_id for message in messages if isinstance(message, UserMessage)]


# --- R8.4 / R8.5 --------------------------------------------------------------------------------


def test_r8_5_partition_example(workspace: Workspace) -> None:
    """[Read a, Read b, Bash c, Grep d, Glob e] → [a,b] | [c] | [d,e]."""
    blocks = [
        use("a", "Read", file_path="a"),
        use("b", "Read", file_path="b"),
        use("c", "Bash", command="ls"),
        use("d", "Grep", pattern="x"),
        use("e", "Glob", pattern="*"),
    ]
    batches = plan_batches(blocks, default_registry(workspace))
    assert [[block.id for block in batch] for batch in batches] == [["a", "b"], ["c"], ["d", "e"]]


def test_r8_4_unknown_invalid_and_raising_calls_are_not_safe(workspace: Workspace) -> None:
    gates = Gates()
    registry = ToolRegistry([*builtin_tools(workspace), FlakySafety(gates, name="Flaky")])
    blocks = [
        use("a", "Read", file_path="a"),
        use("x", "Nope"),
        use("b", "Read", file_path="b"),
        use("y", "Read", limit="many"),
        use("c", "Read", file_path="c"),
        use("z", "Flaky", label="z"),
        use("d", "Read", file_path="d"),
        use("e", "Write", file_path="e", content=""),
    ]
    batches = plan_batches(blocks, registry)
    assert [[block.id for block in batch] for batch in batches] == [
        ["a"],
        ["x"],
        ["b"],
        ["y"],
        ["c"],
        ["z"],
        ["d"],
        ["e"],
    ]


async def test_r8_5_safe_batch_results_in_completion_order() -> None:
    gates = Gates()
    messages = await collect([gate("a", wait_for="x"), gate("b", opens="x")], [GateTool(gates)])
    assert order(messages) == ["b", "a"]


@pytest.mark.parametrize(("calls", "cap"), [(5, 3), (12, 10)])
async def test_r8_5_concurrency_cap(calls: int, cap: int) -> None:
    gates = Gates()
    gates.release_at = cap
    options: dict[str, Any] = {"max_concurrency": cap} if cap != 10 else {}
    messages = await collect([gate(f"g{index}") for index in range(calls)], [GateTool(gates)], **options)
    assert len(results_by_id(messages)) == calls
    assert gates.max_active == cap


async def test_r8_5_unsafe_calls_run_alone_and_in_order(workspace: Workspace) -> None:
    gates = Gates()
    tools = [GateTool(gates, safe=False), *builtin_tools(workspace)]
    blocks = [
        gate("g1"),
        gate("g2"),
        use("w", "Write", file_path="f.txt", content="one\n"),
        use("e", "Edit", file_path="f.txt", old_string="one", new_string="two"),
        use("r", "Read", file_path="f.txt"),
    ]
    messages = await collect(blocks, tools, permissions=permissive(workspace))
    assert order(messages) == ["g1", "g2", "w", "e", "r"]
    assert gates.max_active == 1
    assert results_by_id(messages)["r"].content == "     1→two\n     2→"


# --- R8.1 result messages -----------------------------------------------------------------------


async def test_r8_1_result_message_shape() -> None:
    messages = await collect([gate("t1")], [GateTool(Gates())])
    [message] = messages
    assert isinstance(message, UserMessage)
    assert len(message.blocks) == 1
    assert message.source_tool_assistant_uuid == ASSISTANT_UUID
    assert message.tool_use_result == {"label": "t1"}
    wire = message.to_wire()
    assert wire["sourceToolAssistantUUID"] == ASSISTANT_UUID
    assert wire["toolUseResult"] == {"label": "t1"}
    assert wire["uuid"] == "00000000-0000-4000-8000-000000000001"
    assert wire["timestamp"] == "2026-01-01T00:00:00.000Z"
    assert wire["message"] == {
        "role": "user",
        "content": [{"type": "tool_result", "tool_use_id": "t1", "content": "done t1"}],
    }


async def test_r8_1_unknown_tool() -> None:
    [message] = await collect([use("t1", "Teleport", where="mars")], [GateTool(Gates())])
    block = result(message)
    assert block.content == "<tool_use_error>Error: No such tool available: Teleport</tool_use_error>"
    assert block.is_error is True
    assert isinstance(message, UserMessage)
    assert message.tool_use_result == "Error: No such tool available: Teleport"


@pytest.mark.parametrize(
    ("tool_input", "text"),
    [
        ({}, "Read failed due to the following issue:\nThe required parameter `file_path` is missing"),
        (
            {"file_path": "a", "limit": "many"},
            "Read failed due to the following issue:\n"
            "The parameter `limit` type is expected as `number` but provided as `string`",
        ),
        (
            {"file_path": 3, "pages": "1-2"},
            "Read failed due to the following issues:\n"
            "The parameter `file_path` type is expected as `string` but provided as `number`\n"
            "An unexpected parameter `pages` was provided",
        ),
        (
            {"file_path": "a", "offset": -1},
            "Read failed due to the following issue:\nThe parameter `offset` is invalid",
        ),
    ],
)
async def test_r8_1_input_validation_error(workspace: Workspace, tool_input: dict[str, Any], text: str) -> None:
    [message] = await collect([ToolUseBlock(id="t1", name="Read", input=tool_input)], [ReadTool(workspace)])
    block = result(message)
    assert isinstance(block.content, str)
    assert block.content.startswith(f"<tool_use_error>InputValidationError: {text}")
    assert block.content.endswith("</tool_use_error>")
    assert isinstance(message, UserMessage)
    assert isinstance(message.tool_use_result, str)
    assert message.tool_use_result.startswith("InputValidationError: [")


async def test_r8_1_input_not_an_object(workspace: Workspace) -> None:
    [message] = await collect([ToolUseBlock(id="t1", name="Read", input="a.txt")], [ReadTool(workspace)])
    assert result(message).content == (
        "<tool_use_error>InputValidationError: Read failed due to the following issue:\n"
        "The input must be an object, not string</tool_use_error>"
    )


async def test_r8_1_tool_error_and_exception_texts() -> None:
    messages = await collect([gate("t1", fail="nope"), gate("t2", crash="kaput")], [GateTool(Gates(), safe=False)])
    by_id = results_by_id(messages)
    assert by_id["t1"].content == "<tool_use_error>nope</tool_use_error>"
    assert by_id["t2"].content == "<tool_use_error>Error calling tool (Gate): kaput</tool_use_error>"
    assert [m.tool_use_result for m in messages if isinstance(m, UserMessage)] == [
        "Error: nope",
        "Error calling tool (Gate): kaput",
    ]


async def test_r8_1_permission_denied_texts(workspace: Workspace) -> None:
    tools = builtin_tools(workspace)
    blocks = [use("w", "Write", file_path="x.txt", content="hi"), use("b", "Bash", command="touch y.txt")]
    root = str(workspace.root)
    main = await collect(blocks, tools, permissions=PermissionContext(workspace_root=root))
    for message in main:
        assert result(message).content == REJECT_MESSAGE
        assert result(message).is_error is True
        assert isinstance(message, UserMessage)
        assert message.tool_use_result == f"Error: {REJECT_MESSAGE}"
    sub = await collect(blocks, tools, permissions=PermissionContext(workspace_root=root), is_subagent=True)
    assert result(sub[0]).content == SUBAGENT_REJECT_MESSAGE
    dont_ask = await collect(blocks[:1], tools, permissions=PermissionContext(workspace_root=root, mode="dontAsk"))
    assert result(dont_ask[0]).content == dont_ask_reject_message("Write")
    denied = PermissionContext.from_settings(workspace_root=root, deny=["Write"], mode="bypassPermissions")
    assert result((await collect(blocks[:1], tools, permissions=denied))[0]).content == (
        "Permission to use Write has been denied."
    )
    assert not (workspace.root / "x.txt").exists()
    assert not (workspace.root / "y.txt").exists()


async def test_r8_1_subagent_success_omits_tool_use_result() -> None:
    [omitted] = await collect([gate("t1")], [GateTool(Gates())], is_subagent=True)
    assert isinstance(omitted, UserMessage)
    assert "toolUseResult" not in omitted.to_wire()
    [kept] = await collect([gate("t1")], [GateTool(Gates())], is_subagent=True, keep_subagent_tool_use_result=True)
    assert isinstance(kept, UserMessage)
    assert kept.tool_use_result == {"label": "t1"}


# --- R8.3 progress ------------------------------------------------------------------------------


async def test_r8_3_progress_is_yielded_before_the_result() -> None:
    messages = await collect([gate("t1", progress=2)], [GateTool(Gates())])
    assert [type(message).__name__ for message in messages] == ["ProgressMessage", "ProgressMessage", "UserMessage"]
    first = messages[0]
    assert isinstance(first, ProgressMessage)
    assert (first.tool_use_id, first.parent_tool_use_id) == ("t1", "t1")
    assert first.data == {"type": "gate_progress", "step": 0}
    assert first.to_wire()["parentToolUseID"] == "t1"


async def test_r8_3_bash_progress_through_the_executor(workspace: Workspace, bash_sandbox: Sandbox | None) -> None:
    bash = BashTool(workspace, progress_interval_s=0, sandbox=bash_sandbox)
    command = "echo one; sleep 0.05; echo two"
    messages = await collect([use("b1", "Bash", command=command)], [bash], permissions=permissive(workspace))
    progress = [message for message in messages if isinstance(message, ProgressMessage)]
    assert progress
    assert all(message.data["type"] == "bash_progress" for message in progress)
    assert isinstance(messages[-1], UserMessage)
    assert result(messages[-1]).content == "one\ntwo"


# --- timeouts -----------------------------------------------------------------------------------


async def test_per_tool_timeout_gives_an_error_result() -> None:
    timeouts = ToolTimeouts(default_s=None, per_tool={"Gate": 0.05})
    messages = await collect([gate("t1", forever=True), gate("t2")], [GateTool(Gates(), safe=False)], timeouts=timeouts)
    by_id = results_by_id(messages)
    assert (
        by_id["t1"].content == "<tool_use_error>Error: Tool Gate timed out after 0.05s and was stopped</tool_use_error>"
    )
    assert by_id["t2"].content == "done t2"


async def test_executor_timeout_kills_a_bash_command(workspace: Workspace, bash_sandbox: Sandbox | None) -> None:
    bash = BashTool(workspace, kill_grace_s=0.5, sandbox=bash_sandbox)
    timeouts = ToolTimeouts(per_tool={"Bash": 0.3 if bash_sandbox is None else 1.0})
    sleep, marker = sleeper()
    [message] = await collect(
        [use("b1", "Bash", command=f"echo $$ > pid; {sleep}")],
        [bash],
        permissions=permissive(workspace),
        timeouts=timeouts,
    )
    assert "timed out after" in str(result(message).content)
    assert await _none_left(marker)


# --- R8.9 interrupts ----------------------------------------------------------------------------


async def test_r8_9_interrupt_before_start_rejects_everything() -> None:
    interrupt = ToolInterrupt()
    interrupt.set()
    messages = await collect([gate("t1"), gate("t2")], [GateTool(Gates())], interrupt=interrupt)
    for message in messages:
        assert result(message).content == REJECT_MESSAGE
        assert result(message).is_error is True
        assert isinstance(message, UserMessage)
        assert message.tool_use_result == USER_REJECTED_TOOL_USE


async def test_r8_9_interrupt_cancels_cancel_tools_and_lets_block_tools_finish() -> None:
    gates = Gates()
    tools = [
        GateTool(gates, name="Stoppable", interrupt="cancel"),
        GateTool(gates, name="Stubborn", interrupt="block"),
        GateTool(gates, name="Later", safe=False),
    ]
    interrupt = ToolInterrupt()
    blocks = [gate("c", "Stoppable", forever=True), gate("b", "Stubborn", wait_for="go"), gate("l", "Later")]
    running = asyncio.create_task(collect(blocks, tools, interrupt=interrupt))
    await gates["started:c"].wait()
    await gates["started:b"].wait()
    interrupt.set()
    gates["go"].set()
    by_id = results_by_id(await running)
    assert by_id["c"].content == REJECT_MESSAGE
    assert by_id["b"].content == "done b"
    assert by_id["l"].content == REJECT_MESSAGE
    assert gates.active == 0


async def test_r8_9_interrupt_kills_a_cancel_bash(workspace: Workspace, bash_sandbox: Sandbox | None) -> None:
    bash = BashTool(workspace, interrupt_behavior="cancel", kill_grace_s=0.5, sandbox=bash_sandbox)
    interrupt = ToolInterrupt()
    sleep, marker = sleeper()
    block = use("b1", "Bash", command=f"echo $$ > pid; {sleep}")
    running = asyncio.create_task(collect([block], [bash], permissions=permissive(workspace), interrupt=interrupt))
    await _file_text(workspace.root / "pid")
    interrupt.set()
    [message] = await running
    assert result(message).content == REJECT_MESSAGE
    assert await _none_left(marker)


@pytest.mark.parametrize("reasons", [("user_cancel",), ("interrupt", "user_cancel")], ids=["esc", "typed-then-esc"])
async def test_r8_9_esc_stops_block_tools_too(reasons: tuple[InterruptReason, ...]) -> None:
    """``user_cancel`` (a :class:`ToolInterrupt` with that reason: esc, a stopped sub-agent) stops the running
    ``block`` calls as well as the ``cancel`` ones (bus/interrupts.py); also after an ``interrupt`` (a message
    typed meanwhile) that stopped the ``cancel`` call and let the ``block`` one run on."""
    gates = Gates()
    tools = [GateTool(gates, name="Stoppable", interrupt="cancel"), GateTool(gates, name="Stubborn", interrupt="block")]
    interrupt = ToolInterrupt()
    blocks = [gate("c", "Stoppable", forever=True), gate("b", "Stubborn", forever=True)]
    running = asyncio.create_task(collect(blocks, tools, interrupt=interrupt))
    await gates["started:c"].wait()
    await gates["started:b"].wait()
    *earlier, last = reasons
    for reason in earlier:
        interrupt.interrupt(reason)
        while gates.active > 1:  # the cancel call stops ...
            await asyncio.sleep(0.01)
        assert not running.done()  # ... the block call runs on
    interrupt.interrupt(last)
    by_id = results_by_id(await running)
    assert by_id["c"].content == REJECT_MESSAGE
    assert by_id["b"].content == REJECT_MESSAGE
    assert gates.active == 0


async def test_r8_9_esc_kills_a_block_bash(workspace: Workspace, bash_sandbox: Sandbox | None) -> None:
    bash = BashTool(workspace, kill_grace_s=0.5, sandbox=bash_sandbox)  # interrupt behaviour "block"
    interrupt = ToolInterrupt()
    sleep, marker = sleeper()
    block = use("b1", "Bash", command=f"echo $$ > pid; {sleep}")
    running = asyncio.create_task(collect([block], [bash], permissions=permissive(workspace), interrupt=interrupt))
    await _file_text(workspace.root / "pid")
    interrupt.interrupt("user_cancel")
    [message] = await running
    assert result(message).content == REJECT_MESSAGE
    assert await _none_left(marker)


# --- R8.10 sibling errors -----------------------------------------------------------------------


async def test_r8_10_bash_error_cancels_later_calls(workspace: Workspace) -> None:
    (workspace.root / "a.txt").write_text("a\n")
    tools = builtin_tools(workspace)
    blocks = [
        use("b1", "Bash", command="exit 1"),
        use("r1", "Read", file_path="a.txt"),
        use("r2", "Read", file_path="a.txt"),
    ]
    messages = await collect(blocks, tools, permissions=permissive(workspace))
    by_id = results_by_id(messages)
    assert by_id["b1"].content == "Exit code 1"
    for other in ("r1", "r2"):
        assert (
            by_id[other].content
            == "<tool_use_error>Cancelled: parallel tool call Bash(exit 1) errored</tool_use_error>"
        )
        assert by_id[other].is_error is True
    assert [m.tool_use_result for m in messages if isinstance(m, UserMessage)][1] == (
        "Cancelled: parallel tool call Bash(exit 1) errored"
    )


async def test_r8_10_description_uses_the_first_40_characters(workspace: Workspace) -> None:
    command = "echo 0123456789012345678901234567890123456789; exit 2"
    blocks = [use("b1", "Bash", command=command), use("w1", "Write", file_path="x", content="")]
    by_id = results_by_id(await collect(blocks, builtin_tools(workspace), permissions=permissive(workspace)))
    assert (
        by_id["w1"].content
        == f"<tool_use_error>Cancelled: parallel tool call Bash({command[:40]}…) errored</tool_use_error>"
    )
    assert not (workspace.root / "x").exists()


def test_r8_9_sibling_description_forms() -> None:
    assert results.sibling_description(use("t", "Bash", command="ls")) == "Bash(ls)"
    assert results.sibling_description(use("t", "Bash", pattern="p", file_path="f")) == "Bash(f)"
    assert results.sibling_description(use("t", "Bash", label="x")) == "Bash"
    assert (
        results.sibling_errored(None).content
        == "<tool_use_error>Cancelled: parallel tool call errored</tool_use_error>"
    )


async def test_r8_10_errors_of_other_tools_do_not_cancel(workspace: Workspace) -> None:
    (workspace.root / "a.txt").write_text("a\n")
    blocks = [use("r0", "Read", file_path="missing.txt"), use("b1", "Bash", command="echo ok")]
    by_id = results_by_id(await collect(blocks, builtin_tools(workspace), permissions=permissive(workspace)))
    assert by_id["r0"].is_error is True
    assert by_id["b1"].content == "ok"


async def test_r8_10_bash_error_kills_running_siblings() -> None:
    """A concurrency-safe tool named Bash (e.g. a read-only classifier) errors while siblings run:
    they are cancelled even if they ``block`` on interrupts, and later calls are cancelled too."""
    gates = Gates()
    tools = [GateTool(gates, name="Bash"), GateTool(gates, name="Slow"), GateTool(gates, name="After", safe=False)]
    blocks = [
        gate("s1", "Slow", forever=True),
        gate("b1", "Bash", wait_for="started:s1", fail="bad"),
        gate("a1", "After"),
    ]
    messages = await collect(blocks, tools)
    assert order(messages) == ["b1", "s1", "a1"]
    by_id = results_by_id(messages)
    assert by_id["b1"].content == "<tool_use_error>bad</tool_use_error>"
    assert by_id["s1"].content == "<tool_use_error>Cancelled: parallel tool call Bash errored</tool_use_error>"
    assert by_id["a1"].content == by_id["s1"].content
    assert gates.active == 0


# --- lifecycle and registry ---------------------------------------------------------------------


async def test_closing_the_generator_stops_running_tools(workspace: Workspace, bash_sandbox: Sandbox | None) -> None:
    bash = BashTool(workspace, kill_grace_s=0.5, progress_interval_s=0, sandbox=bash_sandbox)
    sleep, marker = sleeper()
    stream = execute_tool_uses(
        [use("b1", "Bash", command=f"echo $$ > pid; echo hi; {sleep}")],
        assistant_uuid=ASSISTANT_UUID,
        registry=ToolRegistry([bash]),
        permissions=permissive(workspace),
    )
    first = await anext(stream)
    assert isinstance(first, ProgressMessage)
    await stream.aclose()  # type: ignore[attr-defined]
    assert await _none_left(marker)


def test_registry_lookup_by_name_and_alias(workspace: Workspace) -> None:
    class Aliased(GateTool):
        aliases = ("OldGate",)

    registry = ToolRegistry([Aliased(Gates())])
    assert registry.get("Gate") is registry.get("OldGate")
    assert registry.get("Nope") is None
    assert "OldGate" in registry
    with pytest.raises(DuplicateToolName):
        ToolRegistry([GateTool(Gates()), GateTool(Gates())])
    assert default_registry(workspace).names == ["Read", "Glob", "Grep", "Write", "Edit", "Bash"]
    assert isinstance(default_registry(workspace).get("Edit"), EditTool)
    assert isinstance(default_registry(workspace).get("Write"), WriteTool)


# --- process helpers ----------------------------------------------------------------------------


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except FileNotFoundError:
        return False
    return state not in ("Z", "X")


def _processes_with(marker: str) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and int(entry.name) != os.getpid():
            try:
                if marker.encode() in (entry / "cmdline").read_bytes() and _alive(int(entry.name)):
                    found.append(int(entry.name))
            except OSError:
                continue
    return found


async def _none_left(marker: str) -> bool:
    """True once no process holding ``marker`` in its command line is alive (bounded poll)."""
    for _ in range(1000):
        if not _processes_with(marker):
            return True
        await asyncio.sleep(0.01)
    return False


async def _file_text(path: Path) -> str:
    while not path.exists() or not path.read_text().strip():
        await asyncio.sleep(0.01)
    return path.read_text().strip()


# --- at most once: side-effecting calls of a re-run job -------------------------------------------


async def test_a_side_effecting_call_claimed_by_an_earlier_attempt_is_not_run_again(workspace: Workspace) -> None:
    """A job re-run after its worker died: the append that attempt started may have run, so it answers with
    the placeholder instead of appending twice; the harmless echo runs again with its real output."""
    claimed: list[str] = []

    async def earlier_attempt_claimed_everything(call: ToolUseBlock) -> bool:
        claimed.append(call.id)
        return False

    bash = BashTool(workspace, progress_interval_s=0)
    calls = [use("b_append", "Bash", command="echo a >> a.log"), use("b_echo", "Bash", command="echo hi")]
    messages = await collect(
        calls, [bash], permissions=permissive(workspace), run_claim=earlier_attempt_claimed_everything
    )
    found = results_by_id(messages)
    assert (found["b_append"].content, found["b_append"].is_error) == (results.started_before().content, True)
    assert found["b_append"].content == "[Tool result missing due to internal error]"
    assert found["b_echo"].content == "hi"
    assert claimed == ["b_append"]  # the echo needs no claim: running it twice is harmless
    assert not (workspace.root / "a.log").exists()


async def test_a_side_effecting_call_runs_once_its_claim_is_taken(workspace: Workspace) -> None:
    async def first_attempt(call: ToolUseBlock) -> bool:
        return True

    bash = BashTool(workspace, progress_interval_s=0)
    messages = await collect(
        [use("b_append", "Bash", command="echo a >> a.log")],
        [bash],
        permissions=permissive(workspace),
        run_claim=first_attempt,
    )
    assert "is_error" not in result(messages[-1]).model_dump(exclude_none=True)
    assert (workspace.root / "a.log").read_text() == "a\n"
