"""The tool_result texts and messages of tool execution (R8.1, R8.9), byte-exact where Claude
Code's are known."""

from __future__ import annotations

import json
from dataclasses import dataclass

from pydantic import ValidationError

from agentbus_redis.clock import Clock
from agentbus_redis.ids import IdSource
from agentbus_redis.json_types import JsonValue
from agentbus_redis.messages.constants import (
    REJECT_MESSAGE,
    SYNTHETIC_TOOL_RESULT_PLACEHOLDER,
    USER_REJECTED_TOOL_USE,
    tool_use_error,
    with_memory_correction_hint,
)
from agentbus_redis.messages.content import ContentBlock, ToolResultBlock, ToolUseBlock
from agentbus_redis.messages.factories import create_user_message
from agentbus_redis.messages.kinds import UserMessage
from agentbus_redis.tools.tool import ToolOutput

SIBLING_ARG_KEYS = ("command", "file_path", "pattern")
SIBLING_ARG_CHARS = 40


def no_such_tool(name: str) -> ToolOutput:
    """R8.1: unknown tool (no name or alias match)."""
    text = f"Error: No such tool available: {name}"
    return ToolOutput(tool_use_error(text), is_error=True, tool_use_result=text, error_type="tool_not_found")


def _js_type(value: object) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int | float):
        return "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "array"
    return "object" if isinstance(value, dict) else type(value).__name__


_EXPECTED_BY_TYPE_PREFIX = {
    "string": "string",
    "int": "number",
    "float": "number",
    "decimal": "number",
    "bool": "boolean",
    "list": "array",
    "tuple": "array",
    "dict": "object",
    "model": "object",
}


def _format_loc(loc: tuple[int | str, ...]) -> str:
    text = ""
    for part in loc:
        text = f"{text}[{part}]" if isinstance(part, int) else (f"{text}.{part}" if text else str(part))
    return text


def _issue(error: dict[str, object]) -> str:
    raw_loc = error.get("loc")
    loc = _format_loc(tuple(raw_loc)) if isinstance(raw_loc, tuple) else ""
    kind = str(error.get("type", ""))
    message = str(error.get("msg", "is invalid"))
    if kind == "missing":
        return f"The required parameter `{loc}` is missing"
    if kind == "extra_forbidden":
        return f"An unexpected parameter `{loc}` was provided"
    prefix = kind.split("_", 1)[0]
    if kind.endswith(("_type", "_parsing")) and prefix in _EXPECTED_BY_TYPE_PREFIX:
        expected = _EXPECTED_BY_TYPE_PREFIX[prefix]
        return (
            f"The parameter `{loc}` type is expected as `{expected}` but provided as `{_js_type(error.get('input'))}`"
        )
    if not loc:
        return f"The input is invalid: {message}"
    return f"The parameter `{loc}` is invalid: {message}"


def input_validation_error(tool_name: str, error: ValidationError) -> ToolOutput:
    """R8.1: ``<tool_use_error>InputValidationError: TOOL failed due to the following issue(s):…``
    with toolUseResult ``InputValidationError: <the raw issue list as JSON>`` (as Claude Code does
    with zod's message)."""
    issues = [_issue(dict(item)) for item in error.errors(include_url=False)]
    label = "issues" if len(issues) > 1 else "issue"
    text = f"{tool_name} failed due to the following {label}:\n" + "\n".join(issues)
    raw = [
        {"code": item["type"], "path": list(item["loc"]), "message": item["msg"]}
        for item in error.errors(include_url=False)
    ]
    return ToolOutput(
        tool_use_error(f"InputValidationError: {text}"),
        is_error=True,
        tool_use_result=f"InputValidationError: {json.dumps(raw, indent=2)}",
        error_type="invalid_input",
    )


def input_not_an_object(tool_name: str, value: JsonValue) -> ToolOutput:
    """R8.1: a tool_use whose ``input`` is not a JSON object."""
    text = f"{tool_name} failed due to the following issue:\nThe input must be an object, not {_js_type(value)}"
    return ToolOutput(
        tool_use_error(f"InputValidationError: {text}"),
        is_error=True,
        tool_use_result=f"InputValidationError: {text}",
        error_type="invalid_input",
    )


def tool_error(message: str) -> ToolOutput:
    """R8.1: the tool's own validation failure."""
    return ToolOutput(
        tool_use_error(message), is_error=True, tool_use_result=f"Error: {message}", error_type="tool_error"
    )


def error_calling_tool(name: str, error: BaseException) -> ToolOutput:
    """R8.1: an exception while running the tool."""
    text = f"Error calling tool ({name}): {error}"
    kind = type(error)
    return ToolOutput(
        tool_use_error(text), is_error=True, tool_use_result=text, error_type=f"{kind.__module__}.{kind.__qualname__}"
    )


def permission_denied(message: str) -> ToolOutput:
    """R8.1: permission not granted — the decision's own text, not wrapped."""
    return ToolOutput(message, is_error=True, tool_use_result=f"Error: {message}", outcome="denied")


def timed_out(name: str, seconds: float) -> ToolOutput:
    """agentbus: the executor's per-tool time limit ran out; the tool was cancelled (a Bash
    command's process group is killed). Not a Claude Code text."""
    text = f"Error: Tool {name} timed out after {seconds:g}s and was stopped"
    return ToolOutput(tool_use_error(text), is_error=True, tool_use_result=text, outcome="timeout")


def started_before() -> ToolOutput:
    """A side-effecting call an earlier attempt of its job started (its worker died before the result was
    applied): it is not run again — it may have run — and answers with Claude Code's placeholder for a
    result that went missing (R4.28 text), at most once instead of twice."""
    text = SYNTHETIC_TOOL_RESULT_PLACEHOLDER
    return ToolOutput(text, is_error=True, tool_use_result=text, outcome="placeholder")


def user_interrupted() -> ToolOutput:
    """R8.9: a user interrupt — REJECT_MESSAGE (+ the memory hint, off by default, R2.1b)."""
    return ToolOutput(
        with_memory_correction_hint(REJECT_MESSAGE),
        is_error=True,
        tool_use_result=USER_REJECTED_TOOL_USE,
        outcome="interrupted",
    )


def sibling_description(block: ToolUseBlock | None) -> str:
    """R8.9: ``NAME(ARG…)`` — ARG the first 40 characters of command/file_path/pattern, ``…`` when
    cut; ``NAME`` without a usable argument; empty when there is no errored call."""
    if block is None:
        return ""
    inputs = block.input if isinstance(block.input, dict) else {}
    arg = next((value for key in SIBLING_ARG_KEYS if isinstance(value := inputs.get(key), str) and value), None)
    if arg is None:
        return block.name
    cut = arg[:SIBLING_ARG_CHARS] + ("…" if len(arg) > SIBLING_ARG_CHARS else "")
    return f"{block.name}({cut})"


def sibling_errored(errored: ToolUseBlock | None) -> ToolOutput:
    """R8.9/R8.10: ``Cancelled: parallel tool call NAME(ARG…) errored`` (toolUseResult: the same
    text without the tags)."""
    description = sibling_description(errored)
    text = (
        f"Cancelled: parallel tool call {description} errored"
        if description
        else "Cancelled: parallel tool call errored"
    )
    return ToolOutput(tool_use_error(text), is_error=True, tool_use_result=text, outcome="interrupted")


@dataclass(frozen=True, slots=True)
class MessageFactory:
    """Builds the user message carrying one tool_result (R8.1)."""

    assistant_uuid: str
    clock: Clock
    ids: IdSource
    omit_success_result: bool = False
    """Sub-agents: toolUseResult is omitted on success unless configured to keep it (R8.1)."""

    def result(self, block: ToolUseBlock, output: ToolOutput) -> UserMessage:
        """One user message: the tool_result (``is_error`` present only when true), then any
        sibling blocks; ``sourceToolAssistantUUID`` and ``toolUseResult`` set."""
        result = (
            ToolResultBlock(tool_use_id=block.id, content=output.content, is_error=True)
            if output.is_error
            else ToolResultBlock(tool_use_id=block.id, content=output.content)
        )
        content: list[ContentBlock] = [result, *output.sibling_blocks]
        keep = output.is_error or not self.omit_success_result
        return create_user_message(
            content,
            clock=self.clock,
            ids=self.ids,
            tool_use_result=output.tool_use_result if keep else None,
            source_tool_assistant_uuid=self.assistant_uuid,
        )
