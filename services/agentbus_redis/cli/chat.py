"""``agentbus chat SESSION [PROMPT]`` and ``agentbus send SESSION PROMPT --follow``: talk to a session.

The reply is printed as it streams, each tool call as a ``⏺ Read(README.md)`` line with its outcome under
it, API errors as one ``agentbus: …`` line on stderr. One-shot with a PROMPT (or a prompt on stdin that is
not a terminal): exit 0 when the model ended its turn, 1 on an API error or a timeout, 130 when
interrupted. Without one, an interactive loop: prompt, stream, repeat; Ctrl-C during a reply interrupts
the session (R10.1/R10.2) and returns to the prompt, Ctrl-D exits.

The SDK and redis load inside the commands (see cli/bus.py); the event models are pydantic only.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import sys
from typing import TYPE_CHECKING, Annotated, TextIO

import typer

from agentbus_redis.bus.conversation import (
    ApiError,
    ApiRetry,
    AssistantMessageComplete,
    ConversationEvent,
    Interrupted,
    Notice,
    Retracted,
    TaskProgress,
    TextDelta,
    ThinkingDelta,
    ToolCall,
    ToolResult,
    TurnEnd,
    one_line,
)
from agentbus_redis.cli.common import USAGE_ERROR, checked_session_id, fail

if TYPE_CHECKING:
    from agentbus_redis.sdk.client import AgentbusClient

INTERRUPTED = 130
INTERRUPT_GRACE_S = 10.0
"""After Ctrl-C, how long the turn may take to close before we stop watching (it closes as soon as ingestion
has applied the interrupt, or the running tools have answered)."""
PROMPT = "> "
DIM, RESET = "\x1b[2m", "\x1b[0m"


class TurnPrinter:
    """Renders conversation events on a terminal (or a pipe)."""

    def __init__(self, out: TextIO, err: TextIO, *, show_thinking: bool = False, color: bool = False) -> None:
        self.out = out
        self.err = err
        self.show_thinking = show_thinking
        self.color = color
        self._mid_line = False
        self._calls: dict[str, str] = {}
        self._last_call: str | None = None
        self._interrupted = False

    def show(self, event: ConversationEvent) -> None:
        match event:
            case TextDelta(text=text):
                self._write(text)
            case ThinkingDelta(text=text) if self.show_thinking:
                self._write(f"{DIM}{text}{RESET}" if self.color else text)
            case TurnEnd(stop_reason="interrupted") if not self._interrupted:
                self.end_line()  # the interrupt logged no text (a new message follows, or the session was idle)
                self.line("  ⎿  Interrupted by user", err=True)
            case TurnEnd(stop_reason="max_turns"):
                self.end_line()
                self.line("  ⎿  Stopped: the session's max turns were reached", err=True)
            case AssistantMessageComplete() | TurnEnd():
                self.end_line()
            case ToolCall(tool_use_id=tool_use_id, name=name, summary=summary):
                self.end_line()
                self._calls[tool_use_id] = f"{name}({summary})"
                self._last_call = tool_use_id
                self.line(f"⏺ {name}({summary})")
            case ToolResult(tool_use_id=tool_use_id, ok=ok, first_line=first_line):
                self.end_line()
                # Under its own call line, or named when other calls were printed since (parallel calls).
                where = "" if tool_use_id == self._last_call else f"{self._calls.get(tool_use_id, tool_use_id)}: "
                self.line(f"  ⎿  {where}{first_line if ok else 'Error: ' + first_line}")
            case ApiRetry(text=text, retry_in_ms=retry_in_ms, attempt=attempt, max_retries=max_retries):
                self.end_line()
                wait = f" · retrying in {retry_in_ms / 1000:.1f}s" if retry_in_ms is not None else ""
                tries = f" (attempt {attempt}/{max_retries})" if attempt is not None else ""
                self.line(f"  ⎿  {text}{wait}{tries}", err=True)
            case Notice(text=text):
                self.end_line()
                self.line(f"  ⎿  {one_line(text, 200)}", err=True)
            case ApiError(text=text):
                self.end_line()
                self.line(f"agentbus: {' '.join(text.split())}", err=True)
            case TaskProgress(description=description, last_tool_name=tool, usage=usage):
                # A6.3: a sub-agent at work, under its Agent call's line.
                self.end_line()
                uses = usage.get("tool_uses")
                self.line(f"  ⎿  {description} · {tool} ({uses} tool use{'' if uses == 1 else 's'})")
            case Retracted():
                self.end_line()
                self.line("  ⎿  (partial reply withdrawn; the model is asked again)", err=True)
            case Interrupted():
                self.end_line()
                self._interrupted = True
                self.line("  ⎿  Interrupted by user", err=True)

    def _write(self, text: str) -> None:
        if text:
            self.out.write(text)
            self.out.flush()
            self._mid_line = not text.endswith("\n")

    def end_line(self) -> None:
        if self._mid_line:
            self._write("\n")

    def line(self, text: str, *, err: bool = False) -> None:
        stream = self.err if err else self.out
        stream.write(text + "\n")
        stream.flush()


def exit_code(end: TurnEnd | None) -> int:
    """0 when the model ended its turn, 1 on an API error, 130 when interrupted (or never closed)."""
    if end is None or end.stop_reason == "interrupted":
        return INTERRUPTED
    return 1 if end.error is not None else 0


async def follow_turn(bus: AgentbusClient, session: str, prompt: str, printer: TurnPrinter, *, timeout_s: float) -> int:
    """Send ``prompt``, print the turn, return its exit code. The first Ctrl-C (SIGINT) interrupts the session
    and waits up to :data:`INTERRUPT_GRACE_S` for the turn to close; a second one stops at once."""
    from agentbus_redis.sdk.conversation import ConversationTimeout

    end: TurnEnd | None = None

    conversation = bus.converse(session, prompt, timeout_s=timeout_s)

    async def watch() -> None:
        nonlocal end
        async for event in conversation:
            printer.show(event)
            if isinstance(event, TurnEnd):
                end = event

    loop = asyncio.get_running_loop()
    watcher = asyncio.ensure_future(watch())
    presses = 0
    sent: list[asyncio.Future[str]] = []

    def on_interrupt() -> None:
        nonlocal presses
        presses += 1
        if presses == 1:
            sent.append(asyncio.ensure_future(conversation.interrupt()))
            loop.call_later(INTERRUPT_GRACE_S, watcher.cancel)  # a safety net: ingestion may be down
        else:
            watcher.cancel()

    loop.add_signal_handler(signal.SIGINT, on_interrupt)
    try:
        await watcher
    except asyncio.CancelledError:
        printer.end_line()
        if not presses:
            raise
        if presses == 1:
            printer.line(f"agentbus: session {session}: the turn did not close within {INTERRUPT_GRACE_S:g}s", err=True)
    except ConversationTimeout as error:
        printer.end_line()
        printer.line(f"agentbus: {error} (`agentbus up` starts the workers)", err=True)
        return 1
    finally:
        loop.remove_signal_handler(signal.SIGINT)
        for sending in sent:  # the interrupt reaches the bus even when the turn closed first
            await sending
    return INTERRUPTED if presses and (end is None or end.stop_reason == "interrupted") else exit_code(end)


def run_one_turn(session: str, prompt: str, *, timeout_s: float, show_thinking: bool = False) -> int:
    """One turn on a fresh connection (what ``chat SESSION PROMPT`` and ``send --follow`` run)."""
    from agentbus_redis.sdk.client import AgentbusClient

    printer = TurnPrinter(sys.stdout, sys.stderr, show_thinking=show_thinking, color=_color(sys.stdout))

    async def run() -> int:
        async with AgentbusClient.connect() as bus:
            return await follow_turn(bus, session, prompt, printer, timeout_s=timeout_s)

    return asyncio.run(run())


def _color(stream: TextIO) -> bool:
    return stream.isatty() and "NO_COLOR" not in os.environ


def _repl(session: str, *, timeout_s: float, show_thinking: bool) -> None:
    with contextlib.suppress(ImportError):
        import readline  # noqa: F401  (line editing and history for input())
    typer.echo(f"agentbus chat {session}: Ctrl-C interrupts a reply, Ctrl-D exits.", err=True)
    while True:
        try:
            line = input(PROMPT)
        except EOFError:
            typer.echo("", err=True)
            return
        except KeyboardInterrupt:
            typer.echo("", err=True)
            continue
        if line.strip():
            run_one_turn(session, line, timeout_s=timeout_s, show_thinking=show_thinking)


def chat_command(
    session: Annotated[str, typer.Argument(help="Session id.", callback=checked_session_id)],
    prompt: Annotated[
        str | None, typer.Argument(help="One prompt, then exit [default: stdin if piped, else interactive].")
    ] = None,
    timeout_s: Annotated[
        float, typer.Option("--timeout", min=0.1, help="Seconds without any progress before giving up.")
    ] = 300.0,
    thinking: Annotated[bool, typer.Option("--thinking", help="Also print the model's thinking.")] = False,
) -> None:
    """Talk to SESSION: send a prompt, print the reply as it streams with its tool calls and their
    outcomes, until the model ends its turn (exit 0; 1 on an API error, 130 when interrupted). Without
    PROMPT and on a terminal: an interactive loop (Ctrl-C interrupts a reply, Ctrl-D exits)."""
    if prompt is None and not sys.stdin.isatty():
        prompt = sys.stdin.read()
        if not prompt.strip():
            fail("no prompt: stdin was empty", code=USAGE_ERROR)
    if prompt is None:
        _repl(session, timeout_s=timeout_s, show_thinking=thinking)
        return
    raise typer.Exit(run_one_turn(session, prompt, timeout_s=timeout_s, show_thinking=thinking))
