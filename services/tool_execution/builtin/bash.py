"""Bash: run a command in the workspace, in its own process group, streaming ``bash_progress``.

Not a sandbox: the command runs with the worker's rights, starting in the workspace root. The
permission rules (``Bash(git status:*)`` …) are what keeps it in bounds.
"""

from __future__ import annotations

import asyncio
import codecs
import contextlib
import os
import signal
import time
from collections.abc import AsyncIterator, Mapping

from pydantic import Field

from services.tool_execution.tool import (
    InterruptBehavior,
    Tool,
    ToolContext,
    ToolError,
    ToolInput,
    ToolOutput,
    ToolProgress,
)
from services.tool_execution.workspace import Workspace
from shared.json_types import JsonObject

NO_OUTPUT = "(Bash completed with no output)"
QUIET_ENV = {"PAGER": "cat", "GIT_PAGER": "cat", "GIT_TERMINAL_PROMPT": "0", "GIT_EDITOR": "true"}
"""Keep commands from waiting on a pager, an editor or a credential prompt nobody will answer."""


class BashInput(ToolInput):
    command: str
    timeout: int | None = Field(default=None, gt=0)
    """Milliseconds; clamped to the tool's maximum."""
    description: str | None = None
    run_in_background: bool = False


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
    argv: list[str], *, cwd: str, env: dict[str, str]
) -> tuple[asyncio.subprocess.Process, _ExitAwareProtocol]:
    loop = asyncio.get_running_loop()
    transport, protocol = await loop.subprocess_exec(
        lambda: _ExitAwareProtocol(limit=2**16, loop=loop),
        *argv,
        cwd=cwd,
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        start_new_session=True,
        env=env,
    )
    return asyncio.subprocess.Process(transport, protocol, loop), protocol


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
    ) -> None:
        self.workspace = workspace
        self.default_timeout_ms = default_timeout_ms
        self.max_timeout_ms = max_timeout_ms
        self.max_output_chars = max_output_chars
        self.progress_interval_s = progress_interval_s
        self.kill_grace_s = kill_grace_s
        self._interrupt_behavior: InterruptBehavior = interrupt_behavior
        self.shell = shell
        self.env = dict(env) if env is not None else None

    def interrupt_behavior(self) -> InterruptBehavior:
        return self._interrupt_behavior

    async def validate_input(self, tool_input: BashInput, ctx: ToolContext) -> None:
        if tool_input.run_in_background:
            raise ToolError("run_in_background is not supported by this worker; run the command in the foreground.")
        if not tool_input.command.strip():
            raise ToolError("The command is empty.")

    def _environment(self) -> dict[str, str]:
        base = dict(os.environ) if self.env is None else dict(self.env)
        return {**base, **QUIET_ENV}

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
        timeout_ms = min(tool_input.timeout or self.default_timeout_ms, self.max_timeout_ms)
        started = time.monotonic()
        deadline = started + timeout_ms / 1000
        process, protocol = await _spawn(
            [self.shell, "-c", tool_input.command], cwd=str(self.workspace.root), env=self._environment()
        )
        chunks: asyncio.Queue[tuple[str, str] | None] = asyncio.Queue()
        readers = [
            asyncio.create_task(self._pump(process.stdout, "stdout", chunks)),
            asyncio.create_task(self._pump(process.stderr, "stderr", chunks)),
        ]
        outputs = {"stdout": _CappedText(self.max_output_chars), "stderr": _CappedText(self.max_output_chars)}
        exited = asyncio.create_task(protocol.exited.wait())
        fresh: list[str] = []
        lines = 0
        last_progress = started
        open_streams = 2
        timed_out = False
        try:
            while open_streams:
                getter = asyncio.create_task(chunks.get())
                remaining = max(deadline - time.monotonic(), 0)
                done, _ = await asyncio.wait({getter, exited}, timeout=remaining, return_when=asyncio.FIRST_COMPLETED)
                if getter not in done:
                    getter.cancel()  # the chunk stays queued; _finish_readers collects it
                    with contextlib.suppress(asyncio.CancelledError):
                        await getter
                    timed_out = exited not in done
                    break  # timed out, or the command ended while a background child holds the pipes
                item = getter.result()
                if item is None:
                    open_streams -= 1
                    continue
                stream, text = item
                outputs[stream].add(text)
                fresh.append(text)
                lines += text.count("\n")
                now = time.monotonic()
                if now - last_progress >= self.progress_interval_s:
                    yield ToolProgress(self._progress(fresh, lines, now - started))
                    fresh, last_progress = [], now
            if not timed_out:
                try:
                    await asyncio.wait_for(asyncio.shield(exited), max(deadline - time.monotonic(), 0))
                except TimeoutError:
                    timed_out = True
            await self._stop(process, protocol)
            await self._finish_readers(readers, chunks, outputs)
        finally:
            if not protocol.exited.is_set():
                await asyncio.shield(self._stop(process, protocol))
            exited.cancel()
            for reader in readers:
                reader.cancel()
        yield self._result(outputs, process.returncode, timed_out=timed_out, timeout_ms=timeout_ms)

    @staticmethod
    async def _pump(
        stream: asyncio.StreamReader | None, name: str, chunks: asyncio.Queue[tuple[str, str] | None]
    ) -> None:
        if stream is None:
            await chunks.put(None)
            return
        decoder = codecs.getincrementaldecoder("utf-8")(errors="replace")
        try:
            while data := await stream.read(65536):
                await chunks.put((name, decoder.decode(data)))
            tail = decoder.decode(b"", final=True)
            if tail:
                await chunks.put((name, tail))
        finally:
            await chunks.put(None)

    @staticmethod
    async def _finish_readers(
        readers: list[asyncio.Task[None]],
        chunks: asyncio.Queue[tuple[str, str] | None],
        outputs: dict[str, _CappedText],
    ) -> None:
        """After the process ended (or was killed): collect what the pipes still hold. A daemon
        that kept the pipe open past its killed parent cannot hold us up beyond a short wait."""
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(asyncio.gather(*readers, return_exceptions=True), 1.0)
        while not chunks.empty():
            item = chunks.get_nowait()
            if item is not None:
                outputs[item[0]].add(item[1])

    def _progress(self, fresh: list[str], lines: int, elapsed: float) -> JsonObject:
        recent = "".join(fresh)
        return {
            "type": "bash_progress",
            "output": recent[-4000:],
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
