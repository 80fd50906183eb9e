"""An MCP server's tool as a plain tool of the Tool API: named ``mcp__server__tool``, offered with the server's
description and input schema, its arguments passed through (the server validates them)."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable

import mcp_types
from pydantic import BaseModel, ConfigDict

from agentbus_redis.mcp.names import mcp_tool_name
from agentbus_redis.mcp.results import McpProgress, mcp_progress_data, mcp_tool_output
from agentbus_redis.tools.definitions import ToolDefinition
from agentbus_redis.tools.tool import InterruptBehavior, Tool, ToolContext, ToolError, ToolOutput, ToolProgress
from agentbus_redis.workers.tools.mcp.connection import McpConnection, McpServerGone


class McpArguments(BaseModel):
    """Any JSON object: the server's schema is what the model is offered, the server checks the call."""

    model_config = ConfigDict(extra="allow", frozen=True)


class McpTool(Tool[McpArguments]):
    """One tool of one MCP server; ``connection`` finds the connection that runs the call (the worker's, or the
    session's for a per-session server)."""

    input_model = McpArguments

    def __init__(
        self,
        server: str,
        tool: mcp_types.Tool,
        connection: Callable[[], Awaitable[McpConnection]],
        *,
        max_output_chars: int,
    ) -> None:
        self.server = server
        self.tool = tool
        self.name = mcp_tool_name(server, tool.name)
        self.connection = connection
        self.max_output_chars = max_output_chars

    def description(self) -> str:
        return self.tool.description or ""

    def definition(self) -> ToolDefinition:
        return ToolDefinition(name=self.name, description=self.description(), input_schema=self.tool.input_schema)

    def _hint(self, name: str) -> bool:
        annotations = self.tool.annotations
        return bool(annotations is not None and getattr(annotations, name, None) is True)

    def is_read_only(self, tool_input: McpArguments) -> bool:
        return self._hint("read_only_hint")

    def is_concurrency_safe(self, tool_input: McpArguments) -> bool:
        return self._hint("read_only_hint")

    def runs_again_harmlessly(self, tool_input: McpArguments) -> bool:
        return self._hint("read_only_hint") or self._hint("idempotent_hint")

    def interrupt_behavior(self) -> InterruptBehavior:
        return "cancel"

    async def call(self, tool_input: McpArguments, ctx: ToolContext) -> AsyncIterator[ToolProgress | ToolOutput]:
        try:
            connection = await self.connection()
        except McpServerGone as gone:
            raise ToolError(str(gone)) from None
        progress: asyncio.Queue[McpProgress] = asyncio.Queue()
        arguments = tool_input.model_dump(mode="json")
        running = asyncio.create_task(connection.call(self.tool.name, arguments, progress.put_nowait))
        try:
            while not running.done():
                waiting = asyncio.create_task(progress.get())
                await asyncio.wait({running, waiting}, return_when=asyncio.FIRST_COMPLETED)
                if waiting.done():
                    yield ToolProgress(mcp_progress_data(self.server, self.tool.name, waiting.result()))
                else:
                    waiting.cancel()
            while not progress.empty():
                yield ToolProgress(mcp_progress_data(self.server, self.tool.name, progress.get_nowait()))
            try:
                result = running.result()
            except McpServerGone as gone:
                raise ToolError(str(gone)) from None
            yield mcp_tool_output(result, server=self.server, max_chars=self.max_output_chars)
        finally:
            if not running.done():  # interrupted or timed out: cancelling the request tells the server
                running.cancel()
                with contextlib.suppress(BaseException):
                    await running
