"""Run one assistant reply's tool_use blocks (spec §8): partition, permissions, progress, results,
timeouts, interrupts and Bash sibling-error cancellation.

* R8.5 partition: consecutive concurrency-safe calls form one batch run concurrently (at most
  ``max_concurrency``, default 10) whose results are yielded in completion order; every other call
  runs alone; batches run in order.
* R8.1 every tool_use gets exactly one user message with one tool_result (see
  :mod:`agentbus_redis.workers.tools.results` for the texts); R8.3 progress is yielded as it happens.
* R8.9 interrupt (the ``interrupt`` event is set): calls not started get REJECT_MESSAGE with
  toolUseResult ``User rejected tool use``; running calls whose ``interrupt_behavior()`` is
  ``cancel`` are cancelled and get the same; ``block`` calls run to completion — unless the reason is
  ``user_cancel`` (a :class:`ToolInterrupt`'s ``stop_all``: esc, a stopped sub-agent), which cancels them too.
* R8.10 a Bash call ending with an is_error result cancels its running siblings and every later
  call of this reply (``Cancelled: parallel tool call Bash(…) errored``); errors of other tools
  never do. Sticky for the rest of the reply; the erroring call keeps its own result.
* At most once (``run_claim``): a call that could not harmlessly run twice (``Tool.runs_again_harmlessly``)
  is claimed right before it starts; a claim
  held by an earlier attempt (a job re-run after its worker died) means the call may have run already,
  so it is not run again and answers with the missing-result placeholder.
* Per-tool time limit (:class:`ToolTimeouts`): the call is cancelled and gets
  ``<tool_use_error>Error: Tool NAME timed out after Ns and was stopped</tool_use_error>``.

Closing the returned generator early cancels (and awaits) every running call.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace

from pydantic import BaseModel, ValidationError

from agentbus_redis.bus.interrupts import InterruptReason, interrupt_stops
from agentbus_redis.clock import Clock, utc_now
from agentbus_redis.ids import IdSource, random_uuid
from agentbus_redis.messages.constants import REJECT_MESSAGE
from agentbus_redis.messages.content import ToolUseBlock
from agentbus_redis.messages.factories import create_progress_message
from agentbus_redis.messages.kinds import ProgressMessage, UserMessage
from agentbus_redis.observability.metrics import record_tool_execution
from agentbus_redis.observability.tracing import Span
from agentbus_redis.permissions.decide import PermissionContext, decide
from agentbus_redis.tools.tool import AnyTool, ToolContext, ToolError, ToolOutput, ToolProgress
from agentbus_redis.workers.tools import results
from agentbus_redis.workers.tools.registry import ToolRegistry
from agentbus_redis.workers.tools.tool_spans import ToolCallSpans

MAX_TOOL_USE_CONCURRENCY = 10
"""R8.5: ``CLAUDE_CODE_MAX_TOOL_USE_CONCURRENCY`` default."""
BASH_TOOL_NAME = "Bash"

RunClaim = Callable[[ToolUseBlock], Awaitable[bool]]
"""Claims a side-effecting call for this attempt; False when an earlier attempt claimed it (it may have run)."""


@dataclass(frozen=True, slots=True)
class ToolTimeouts:
    """Wall-clock limits per call, in seconds (``None`` = unlimited). A Bash command's own
    ``timeout`` argument is enforced by the tool; this is the executor's outer guard."""

    default_s: float | None = 900.0
    per_tool: Mapping[str, float | None] = field(default_factory=dict)

    def for_tool(self, name: str, declared: float | None = None) -> float | None:
        """The operator's limit for ``name``, else the tool's own (``Tool.timeout_s``), else the default."""
        if name in self.per_tool:
            return self.per_tool[name]
        return declared if declared is not None else self.default_s


@dataclass
class _Call:
    """One tool_use, prepared: its tool and parsed input, or the error result it already has."""

    index: int
    block: ToolUseBlock
    tool: AnyTool | None = None
    parsed: BaseModel | None = None
    early: ToolOutput | None = None
    safe: bool = False


@dataclass
class _Finished:
    call: _Call
    output: ToolOutput


def _prepare(index: int, block: ToolUseBlock, registry: ToolRegistry) -> _Call:
    """Find the tool, validate the input, classify it (R8.4: unknown or invalid → not safe;
    ``is_concurrency_safe`` raising → not safe)."""
    tool = registry.get(block.name)
    if tool is None:
        return _Call(index, block, early=results.no_such_tool(block.name))
    if not isinstance(block.input, dict):
        return _Call(index, block, tool, early=results.input_not_an_object(tool.name, block.input))
    try:
        parsed = tool.input_model.model_validate(block.input)
    except ValidationError as error:
        return _Call(index, block, tool, early=results.input_validation_error(tool.name, error))
    try:
        safe = bool(tool.is_concurrency_safe(parsed))
    except Exception:
        safe = False
    return _Call(index, block, tool, parsed, safe=safe)


def _partition(calls: Sequence[_Call]) -> list[list[_Call]]:
    """R8.5: consecutive safe calls share a batch; each unsafe call is a batch of its own."""
    batches: list[list[_Call]] = []
    for call in calls:
        if call.safe and batches and batches[-1][0].safe:
            batches[-1].append(call)
        else:
            batches.append([call])
    return batches


def plan_batches(tool_uses: Sequence[ToolUseBlock], registry: ToolRegistry) -> list[list[ToolUseBlock]]:
    """R8.5 partition of ``tool_uses`` as the executor will run them (for inspection and tests)."""
    calls = [_prepare(index, block, registry) for index, block in enumerate(tool_uses)]
    return [[call.block for call in batch] for batch in _partition(calls)]


def _runs_again_harmlessly(tool: AnyTool, parsed: BaseModel) -> bool:
    try:
        return bool(tool.runs_again_harmlessly(parsed))
    except Exception:
        return False


class ToolInterrupt(asyncio.Event):
    """A job's interrupt (R8.9, bus/interrupts.py). As an event it is set by any interrupt of the session, which
    rejects the calls not started and stops the running ``cancel`` ones; ``stop_all`` is set as well once an
    interrupt's reason is ``user_cancel`` (esc, a stopped sub-agent, a stuck turn's end), which stops the running
    ``block`` calls too. ``set()`` alone is an ``interrupt``-reason one."""

    def __init__(self) -> None:
        super().__init__()
        self.stop_all = asyncio.Event()

    def interrupt(self, reason: InterruptReason) -> None:
        if reason == "user_cancel":
            self.stop_all.set()
        self.set()


class _Run:
    """State of one ``execute_tool_uses`` run."""

    def __init__(
        self,
        *,
        permissions: PermissionContext,
        timeouts: ToolTimeouts,
        interrupt: ToolInterrupt | None,
        messages: results.MessageFactory,
        clock: Clock,
        ids: IdSource,
        max_concurrency: int,
        spans: ToolCallSpans | None = None,
        run_claim: RunClaim | None = None,
        context: ToolContext | None = None,
    ) -> None:
        self.permissions = permissions
        self.context = context
        self.spans = spans
        self.run_claim = run_claim
        self.open_spans: dict[int, Span] = {}
        """The ``execute_tool`` span of each started call, ended with its result."""
        self.timeouts = timeouts
        self.interrupt = interrupt
        self.messages = messages
        self.clock = clock
        self.ids = ids
        self.max_concurrency = max(1, max_concurrency)
        self.errored: ToolUseBlock | None = None
        self.events: asyncio.Queue[ProgressMessage | _Finished] = asyncio.Queue()
        self.running: dict[asyncio.Task[None], _Call] = {}
        """Tasks not yet awaited."""
        self.outstanding: dict[int, _Call] = {}
        """Started calls whose result message has not been yielded, by position."""
        self._interrupt_seen = False
        self._stop_all_seen = False
        self.started: dict[int, float] = {}
        """perf_counter() when each started call began (for the duration metric)."""

    # --- outcomes ---------------------------------------------------------------------------

    def _interrupted(self) -> bool:
        return self.interrupt is not None and self.interrupt.is_set()

    def synthetic_before_start(self) -> ToolOutput | None:
        """R8.9: decided before a call starts — sibling error first, then the user interrupt."""
        if self.errored is not None:
            return results.sibling_errored(self.errored)
        if self._interrupted():
            return results.user_interrupted()
        return None

    def finish(self, call: _Call, output: ToolOutput) -> UserMessage:
        """The result message; a Bash is_error result marks the run as errored (R8.10) — not the placeholder of
        a call an earlier attempt started: the command did not fail, its outcome is unknown."""
        bash_failed = output.is_error and output.outcome != "placeholder"
        if bash_failed and call.tool is not None and call.tool.name == BASH_TOOL_NAME and self.errored is None:
            self.errored = call.block
        return self._result(call, output)

    def _result(self, call: _Call, output: ToolOutput) -> UserMessage:
        """The result message of ``call``, counted once in the tool metrics (outcome and run time)."""
        started = self.started.pop(call.index, None)
        outcome = output.outcome or ("error" if output.is_error else "ok")
        record_tool_execution(
            call.block.name,
            outcome,  # type: ignore[arg-type]
            None if started is None else time.perf_counter() - started,
        )
        span = self.open_spans.pop(call.index, None)
        if span is None and self.spans is not None:  # answered without running: its span is the answer's
            span = self.spans.open(call.block)
        if span is not None:
            ToolCallSpans.close(span, output)
        return self.messages.result(call.block, output)

    # --- one call ---------------------------------------------------------------------------

    async def _invoke(self, call: _Call) -> ToolOutput:
        tool, parsed = call.tool, call.parsed
        assert tool is not None
        assert parsed is not None
        span = self.open_spans.get(call.index)
        traceparent = None if span is None else span.traceparent
        if self.context is None:
            ctx = ToolContext(tool_use_id=call.block.id, traceparent=traceparent)
        else:
            ctx = replace(self.context, tool_use_id=call.block.id, traceparent=traceparent)
        await tool.validate_input(parsed, ctx)
        try:
            read_only: bool | None = bool(tool.is_read_only(parsed))
        except Exception:
            read_only = False
        decision = decide(
            tool.name,
            call.block.input,
            self.permissions,
            read_only=read_only,
            extra_paths=tool.permission_paths(parsed),
        )
        if not decision.allowed:
            return results.permission_denied(decision.message or REJECT_MESSAGE)
        claim = None if _runs_again_harmlessly(tool, parsed) else self.run_claim
        if claim is not None and not await claim(call.block):
            return results.started_before()
        output: ToolOutput | None = None
        stream = tool.call(parsed, ctx)
        try:
            async for event in stream:
                if isinstance(event, ToolProgress):
                    await self.events.put(
                        create_progress_message(
                            tool_use_id=event.tool_use_id or call.block.id,
                            parent_tool_use_id=call.block.id,
                            data=event.data,
                            clock=self.clock,
                            ids=self.ids,
                        )
                    )
                else:
                    output = event
                    break
        finally:
            await stream.aclose()  # type: ignore[attr-defined]
        if output is None:
            raise RuntimeError("the tool finished without a result")
        return output

    async def _run_call(self, call: _Call) -> None:
        name = call.tool.name if call.tool is not None else call.block.name
        limit = self.timeouts.for_tool(name, None if call.tool is None else call.tool.timeout_s)
        deadline = asyncio.timeout(limit)
        try:
            async with deadline:
                output = await self._invoke(call)
        except TimeoutError:
            output = (
                results.timed_out(name, limit or 0.0)
                if deadline.expired()
                else results.error_calling_tool(name, TimeoutError("timed out"))
            )
        except ToolError as error:
            output = results.tool_error(error.message)
        except Exception as error:
            output = results.error_calling_tool(name, error)
        await self.events.put(_Finished(call, output))

    # --- one batch --------------------------------------------------------------------------

    async def _cancel(self, calls: list[_Call]) -> list[_Call]:
        """Cancel these calls' tasks and wait for them; returns the ones actually cancelled (a call
        that finished meanwhile keeps its real result, already queued)."""
        tasks = {call.index: task for task, call in self.running.items()}
        for call in calls:
            tasks[call.index].cancel()
        cancelled: list[_Call] = []
        for call in sorted(calls, key=lambda item: item.index):
            task = tasks[call.index]
            with contextlib.suppress(asyncio.CancelledError):
                await task
            del self.running[task]
            if task.cancelled():
                cancelled.append(call)
                self.outstanding.pop(call.index, None)
        return cancelled

    async def _next_event(self) -> ProgressMessage | _Finished | None:
        """The next queued event, or None when an interrupt fires first: the first interrupt, then (once) a
        ``user_cancel`` one that came after an ``interrupt`` one."""
        getter: asyncio.Task[ProgressMessage | _Finished] = asyncio.create_task(self.events.get())
        watchers: list[asyncio.Task[bool]] = []
        if self.interrupt is not None and not self._interrupt_seen:
            watchers.append(asyncio.create_task(self.interrupt.wait()))
        if self.interrupt is not None and not self._stop_all_seen:
            watchers.append(asyncio.create_task(self.interrupt.stop_all.wait()))
        waiters: set[asyncio.Task[ProgressMessage | _Finished] | asyncio.Task[bool]] = {getter, *watchers}
        try:
            done, _ = await asyncio.wait(waiters, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for watcher in watchers:
                if not watcher.done():
                    watcher.cancel()
        if getter in done:
            return getter.result()
        getter.cancel()  # the event stays queued (Queue.get only dequeues when it returns)
        with contextlib.suppress(asyncio.CancelledError):
            await getter
        self._interrupt_seen = True
        self._stop_all_seen = self.interrupt is not None and self.interrupt.stop_all.is_set()
        return None

    def _start(self, call: _Call) -> None:
        self.started[call.index] = time.perf_counter()
        if self.spans is not None:
            self.open_spans[call.index] = self.spans.open(call.block)
        self.outstanding[call.index] = call
        self.running[asyncio.create_task(self._run_call(call))] = call

    async def batch(self, calls: list[_Call]) -> AsyncIterator[ProgressMessage | UserMessage]:
        pending = list(calls)
        while pending or self.outstanding:
            while pending and len(self.running) < self.max_concurrency:
                call = pending.pop(0)
                synthetic = self.synthetic_before_start()
                if synthetic is not None:
                    yield self._result(call, synthetic)
                elif call.early is not None:
                    yield self.finish(call, call.early)
                else:
                    self._start(call)
            if not self.outstanding:
                continue
            event = await self._next_event()
            if event is None:  # R8.9: interrupt — cancel the ``cancel`` calls (all of them for ``user_cancel``)
                reason: InterruptReason = "user_cancel" if self._stop_all_seen else "interrupt"
                victims = [
                    c for c in self.running.values() if c.tool and interrupt_stops(reason, c.tool.interrupt_behavior())
                ]
                for call in await self._cancel(victims):
                    yield self._result(call, results.user_interrupted())
                continue
            if isinstance(event, ProgressMessage):
                if any(c.block.id == event.parent_tool_use_id for c in self.outstanding.values()):
                    yield event
                continue
            if self.outstanding.pop(event.call.index, None) is None:
                continue
            self.running = {task: c for task, c in self.running.items() if c is not event.call}
            yield self.finish(event.call, event.output)
            if self.errored is event.call.block and self.running:  # R8.10: kill running siblings
                for call in await self._cancel(list(self.running.values())):
                    yield self._result(call, results.sibling_errored(self.errored))

    async def close(self) -> None:
        await self._cancel(list(self.running.values()))
        for span in self.open_spans.values():  # stopped before their result: no answer to record
            ToolCallSpans.abandon(span)
        self.open_spans.clear()


async def execute_tool_uses(
    tool_uses: Sequence[ToolUseBlock],
    *,
    assistant_uuid: str,
    registry: ToolRegistry,
    permissions: PermissionContext,
    timeouts: ToolTimeouts | None = None,
    interrupt: ToolInterrupt | None = None,
    clock: Clock = utc_now,
    ids: IdSource = random_uuid,
    is_subagent: bool = False,
    keep_subagent_tool_use_result: bool = False,
    max_concurrency: int = MAX_TOOL_USE_CONCURRENCY,
    spans: ToolCallSpans | None = None,
    run_claim: RunClaim | None = None,
    context: ToolContext | None = None,
) -> AsyncIterator[ProgressMessage | UserMessage]:
    """Run ``tool_uses`` (one assistant reply's, in order) and yield progress messages and one
    result message per tool_use (see the module docstring); ``spans`` opens each call's
    ``execute_tool`` span (tool_spans.py); ``run_claim`` makes side-effecting calls at most once; ``context``
    holds the job's facts each call's :class:`ToolContext` starts from (the session's sandbox network)."""
    decided = permissions if permissions.is_subagent == is_subagent else replace(permissions, is_subagent=is_subagent)
    run = _Run(
        permissions=decided,
        timeouts=timeouts or ToolTimeouts(),
        interrupt=interrupt,
        messages=results.MessageFactory(
            assistant_uuid, clock, ids, omit_success_result=is_subagent and not keep_subagent_tool_use_result
        ),
        clock=clock,
        ids=ids,
        max_concurrency=max_concurrency,
        spans=spans,
        run_claim=run_claim,
        context=context,
    )
    calls = [_prepare(index, block, registry) for index, block in enumerate(tool_uses)]
    try:
        for batch in _partition(calls):
            async for message in run.batch(batch):
                yield message
    finally:
        await run.close()
