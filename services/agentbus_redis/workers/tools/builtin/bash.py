"""Bash: run a command in the workspace, in its own process group, streaming ``bash_progress``.

With a :class:`~agentbus_redis.sandbox.runner.Sandbox` (a tool worker's default) the command runs under
bubblewrap: only its workspace writable, no network (or only allow-listed domains through the worker's
proxy), its own PID namespace, an allow-listed environment and
resource limits. The permission rules (``Bash(git status:*)`` …) are checked before it runs: the sandbox is
the second wall. Without one (``AGENTBUS_TOOLS__SANDBOX=off``) it runs with the worker's rights and
environment, starting in the workspace root.
"""

from __future__ import annotations

import asyncio
import codecs
import contextlib
import os
import signal
import time
from collections.abc import AsyncIterator, Mapping
from typing import Any

from pydantic import Field

from agentbus_redis.confinement.limits import closing_descriptors_argv, dying_with_worker_argv
from agentbus_redis.json_types import JsonObject
from agentbus_redis.permissions.bash.effects import runs_without_side_effects
from agentbus_redis.sandbox.runner import Sandbox
from agentbus_redis.tools.tool import (
    InterruptBehavior,
    Tool,
    ToolContext,
    ToolError,
    ToolInput,
    ToolOutput,
    ToolProgress,
)
from agentbus_redis.workers.tools.workspace import Workspace

NO_OUTPUT = "(Bash completed with no output)"
QUIET_ENV = {"PAGER": "cat", "GIT_PAGER": "cat", "GIT_TERMINAL_PROMPT": "0", "GIT_EDITOR": "true"}
"""Keep commands from waiting on a pager, an editor or a credential prompt nobody will answer."""
PROGRESS_OUTPUT_CHARS = 4000
"""A ``bash_progress`` report carries at most the last this many characters of the new output."""
PIPE_READ_BYTES = 65536


class BashInput(ToolInput):
    command: str = Field(description="The command to run")
    timeout: int | None = Field(default=None, gt=0, description="Optional timeout in milliseconds")
    """Milliseconds; clamped to the tool's maximum."""
    description: str | None = Field(
        default=None,
        description="A clear, concise description of what the command does in 5-10 words, in active voice "
        '(e.g. "List files in current directory")',
    )
    run_in_background: bool = Field(
        default=False, description="Not supported by this worker: leave it out (commands run in the foreground)"
    )


class _CappedText:
    """Keeps the first ``cap`` characters of a stream and counts the lines dropped after that."""

    def __init__(self, cap: int) -> None:
        self.cap = cap
        self.kept: list[str] = []
        self.size = 0
        self.dropped_lines = 0
        self.truncated = False

    def add(self, text: str) -> None:
        room = self.cap - self.size
        if room > 0:
            self.kept.append(text[:room])
            self.size += min(room, len(text))
        if len(text) > room:
            self.truncated = True
            self.dropped_lines += text[max(room, 0) :].count("\n")

    def text(self) -> str:
        body = "".join(self.kept)
        if self.truncated:
            body = body.rstrip("\n") + f"\n\n... [{self.dropped_lines} lines truncated] ..."
        return body


class _CommandOutput:
    """A running command's output, capped as it arrives: nothing grows with the size of the output
    (a 100 MB command costs the worker the caps, not 100 MB). The pipes are read as fast as they fill
    and each chunk lands here at once; the progress loop only looks at what is kept."""

    def __init__(self, cap: int, progress_chars: int) -> None:
        self.streams = {"stdout": _CappedText(cap), "stderr": _CappedText(cap)}
        self.progress_chars = progress_chars
        self.recent = ""
        """The last ``progress_chars`` characters that arrived since the last progress report."""
        self.fresh = False
        self.lines = 0
        self._arrival: asyncio.Future[None] | None = None

    def add(self, stream: str, text: str) -> None:
        self.streams[stream].add(text)
        self.recent = (self.recent + text)[-self.progress_chars :]
        self.fresh = True
        self.lines += text.count("\n")
        if self._arrival is not None and not self._arrival.done():
            self._arrival.set_result(None)

    def next_arrival(self) -> asyncio.Future[None]:
        """Resolves when more output arrives."""
        self._arrival = asyncio.get_running_loop().create_future()
        return self._arrival

    def take_recent(self) -> str:
        recent, self.recent, self.fresh = self.recent, "", False
        return recent


class _ExitAwareProtocol(asyncio.subprocess.SubprocessStreamProtocol):
    """Signals when the shell itself exits. ``Process.wait()`` also waits for the pipes to close,
    which a background child (``sleep 99 &``) can keep open long after the command is done."""

    def __init__(self, limit: int, loop: asyncio.AbstractEventLoop) -> None:
        super().__init__(limit=limit, loop=loop)
        self.exited = asyncio.Event()

    def process_exited(self) -> None:
        super().process_exited()
        self.exited.set()


async def _spawn(
    argv: list[str], *, cwd: str, env: dict[str, str], lifeline: bool
) -> tuple[asyncio.subprocess.Process, _ExitAwareProtocol]:
    """``lifeline``: stdin is a pipe the worker holds open and never writes (``dying_with_worker_argv``)."""
    loop = asyncio.get_running_loop()
    transport, protocol = await loop.subprocess_exec(
        lambda: _ExitAwareProtocol(limit=PIPE_READ_BYTES, loop=loop),
        *argv,
        cwd=cwd,
        stdin=asyncio.subprocess.PIPE if lifeline else asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        start_new_session=True,
        env=env,
    )
    return asyncio.subprocess.Process(transport, protocol, loop), protocol


async def _pump(stream: asyncio.StreamReader | None, name: str, output: _CommandOutput) -> None:
    """Read one pipe into ``output`` as it fills (the reader's buffer pauses the pipe beyond 2 × 64 KB)."""
    if stream is None:
        return
    decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
    while data := await stream.read(PIPE_READ_BYTES):
        output.add(name, decoder.decode(data))
    tail = decoder.decode(b"", final=True)
    if tail:
        output.add(name, tail)


def _minutes(milliseconds: int) -> str:
    minutes = milliseconds / 60_000
    return f"{minutes:g} minute" + ("" if minutes == 1 else "s")


def _kill_group(pid: int, sig: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, sig)


class BashTool(Tool[BashInput]):
    """Runs ``shell -c command`` with the workspace as cwd. Output of each stream is capped at
    ``max_output_chars``; progress is emitted at most every ``progress_interval_s`` while output
    arrives. On timeout, cancellation or interrupt the whole process group gets SIGTERM, then SIGKILL
    after ``kill_grace_s``."""

    name = "Bash"
    input_model = BashInput

    def __init__(
        self,
        workspace: Workspace,
        *,
        default_timeout_ms: int = 120_000,
        max_timeout_ms: int = 600_000,
        max_output_chars: int = 30_000,
        progress_interval_s: float = 1.0,
        kill_grace_s: float = 2.0,
        interrupt_behavior: InterruptBehavior = "block",
        shell: str = "/bin/bash",
        env: Mapping[str, str] | None = None,
        sandbox: Sandbox | None = None,
    ) -> None:
        self.workspace = workspace
        self.sandbox = sandbox
        self.default_timeout_ms = default_timeout_ms
        self.max_timeout_ms = max_timeout_ms
        self.max_output_chars = max_output_chars
        self.progress_interval_s = progress_interval_s
        self.kill_grace_s = kill_grace_s
        self._interrupt_behavior: InterruptBehavior = interrupt_behavior
        self.shell = shell
        self.env = dict(env) if env is not None else None

    def runs_again_harmlessly(self, tool_input: BashInput) -> bool:
        """A command that only reads and prints (``permissions/bash/effects.py``): a re-run job runs it again."""
        return runs_without_side_effects(tool_input.command)

    def interrupt_behavior(self) -> InterruptBehavior:
        return self._interrupt_behavior

    def description(self) -> str:
        shell = os.path.basename(self.shell)
        return (
            "Executes a shell command and returns its output.\n\n"
            "Usage:\n"
            f"- The command runs as `{shell} -c COMMAND` in a new shell whose working directory is the workspace "
            "root: nothing (cd, variables) carries over from one call to the next.\n"
            f"- timeout is in milliseconds: {self.default_timeout_ms} ({_minutes(self.default_timeout_ms)}) "
            f"unless given, at most {self.max_timeout_ms} ({_minutes(self.max_timeout_ms)}). A command that "
            "runs out of time is killed.\n"
            "- The result is stdout, then stderr; a non-zero exit status is reported as an error with its "
            f"code. Output beyond {self.max_output_chars} characters per stream is cut.\n"
            "- Commands get no input (stdin is empty; pagers and editors are disabled), and run in the "
            "foreground only.\n"
            + (
                "- Commands run in a sandbox: only the workspace (and a private /tmp) is writable, "
                + self._network_note()
                + ", and CPU time, memory, processes and file sizes are limited.\n"
                if self.sandbox is not None
                else ""
            )
            + "- Quote paths that contain spaces with double quotes.\n"
            "- Use Read, Glob, Grep, Edit and Write rather than cat, find, grep, sed or echo for files.\n"
            "- Give independent commands as separate tool calls in one response; chain dependent ones with &&."
        )

    def _network_note(self) -> str:
        if self.sandbox is None or self.sandbox.network is None:
            return "there is no network access"
        return (
            "network access goes through an HTTP(S) proxy (set in the environment) that admits only the "
            "allowed domains (the deployment's, or the session's narrower list) and answers 403 for any other"
        )

    async def validate_input(self, tool_input: BashInput, ctx: ToolContext) -> None:
        if tool_input.run_in_background:
            raise ToolError("run_in_background is not supported by this worker; run the command in the foreground.")
        if not tool_input.command.strip():
            raise ToolError("The command is empty.")

    def _environment(self, sandbox: Sandbox | None) -> dict[str, str]:
        if sandbox is not None:  # the allow-listed names only: never the worker's secrets
            return {**sandbox.environment(self.workspace.root, self.env), **QUIET_ENV}
        base = dict(os.environ) if self.env is None else dict(self.env)
        return {**base, **QUIET_ENV}

    def _argv(self, sandbox: Sandbox | None, command: str) -> list[str]:
        if sandbox is not None:
            argv = sandbox.argv(self.workspace.root, self.shell, command)
        else:  # bubblewrap ends a sandboxed command with its worker; this one needs the lifeline
            argv = dying_with_worker_argv(self.shell, [self.shell, "-c", command])
        return closing_descriptors_argv(self.shell, argv)

    async def _stop(self, process: asyncio.subprocess.Process, protocol: _ExitAwareProtocol) -> None:
        """SIGTERM the group, SIGKILL it after the grace period; a finished shell's leftover
        background children are killed right away."""
        if not protocol.exited.is_set():
            _kill_group(process.pid, signal.SIGTERM)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(protocol.exited.wait(), self.kill_grace_s)
        _kill_group(process.pid, signal.SIGKILL)
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(protocol.exited.wait(), self.kill_grace_s)

    async def call(self, tool_input: BashInput, ctx: ToolContext) -> AsyncIterator[ToolProgress | ToolOutput]:
        if self.sandbox is None:
            async for item in self._run(None, tool_input):
                yield item
            return
        if ctx.sandbox_network_refused is not None:
            raise ToolError(f"The command was not run: {ctx.sandbox_network_refused}")
        async with self.sandbox.networked(ctx.sandbox_network) as sandbox:  # the calling session's allow-list
            async for item in self._run(sandbox, tool_input):
                yield item

    async def _run(self, sandbox: Sandbox | None, tool_input: BashInput) -> AsyncIterator[ToolProgress | ToolOutput]:
        timeout_ms = min(tool_input.timeout or self.default_timeout_ms, self.max_timeout_ms)
        started = time.monotonic()
        deadline = started + timeout_ms / 1000
        process, protocol = await _spawn(
            self._argv(sandbox, tool_input.command),
            cwd=str(self.workspace.root),
            env=self._environment(sandbox),
            lifeline=sandbox is None,
        )
        output = _CommandOutput(self.max_output_chars, PROGRESS_OUTPUT_CHARS)
        readers = [
            asyncio.create_task(_pump(process.stdout, "stdout", output)),
            asyncio.create_task(_pump(process.stderr, "stderr", output)),
        ]
        reading = asyncio.gather(*readers, return_exceptions=True)
        exited = asyncio.create_task(protocol.exited.wait())
        last_progress = started
        timed_out = False
        try:
            # Until both pipes close; or the shell exits while a background child holds them open.
            while not reading.done() and not exited.done():
                arrival = output.next_arrival()
                remaining = max(deadline - time.monotonic(), 0)
                awaited: set[asyncio.Future[Any]] = {reading, exited, arrival}
                done, _ = await asyncio.wait(awaited, timeout=remaining, return_when=asyncio.FIRST_COMPLETED)
                arrival.cancel()
                if not done:
                    timed_out = True
                    break
                now = time.monotonic()
                if output.fresh and now - last_progress >= self.progress_interval_s:
                    yield ToolProgress(self._progress(output.take_recent(), output.lines, now - started))
                    last_progress = now
            if not timed_out:
                try:
                    await asyncio.wait_for(asyncio.shield(exited), max(deadline - time.monotonic(), 0))
                except TimeoutError:
                    timed_out = True
            await self._stop(process, protocol)
            # What the pipes still hold; a daemon that kept them open past its killed parent cannot
            # hold us up beyond a short wait.
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(asyncio.shield(reading), 1.0)
        finally:
            if not protocol.exited.is_set():
                await asyncio.shield(self._stop(process, protocol))
            if process.stdin is not None:  # the lifeline: its watchdog is gone with the group
                process.stdin.close()
            exited.cancel()
            reading.cancel()
        yield self._result(output.streams, process.returncode, timed_out=timed_out, timeout_ms=timeout_ms)

    def _progress(self, recent: str, lines: int, elapsed: float) -> JsonObject:
        return {
            "type": "bash_progress",
            "output": recent,
            "elapsedTimeSeconds": round(elapsed, 1),
            "totalLines": lines,
        }

    def _result(
        self, outputs: dict[str, _CappedText], returncode: int | None, *, timed_out: bool, timeout_ms: int
    ) -> ToolOutput:
        stdout, stderr = outputs["stdout"].text(), outputs["stderr"].text()
        combined = "\n".join(part.rstrip("\n") for part in (stdout, stderr) if part.strip())
        if timed_out:
            text = f"Command timed out after {timeout_ms}ms and was killed." + (f"\n{combined}" if combined else "")
            return ToolOutput(text, is_error=True, tool_use_result=f"Error: {text}")
        code = returncode if returncode is not None and returncode >= 0 else 128 - (returncode or 0)
        if code != 0:
            text = f"Exit code {code}" + (f"\n{combined}" if combined else "")
            return ToolOutput(text, is_error=True, tool_use_result=f"Error: {text}")
        return ToolOutput(
            combined or NO_OUTPUT,
            tool_use_result={"stdout": stdout, "stderr": stderr, "interrupted": False, "isImage": False},
        )
