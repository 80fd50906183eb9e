"""Client tool pairing and tool-block rules of a Messages API request (anthropic-api-rules.md §1.1–§1.4,
§1.11, §3.1, §3.2, §3.6, §3.8; Claude Code R1.8, R4.19, R4.26).

``tool_use`` ids live in assistant messages and are answered by ``tool_result`` blocks in the very next
user message; server tools (``server_tool_use``/``mcp_tool_use``, ids ``srvtoolu_…``) are answered in the
*same* assistant message and never need a client result. :data:`TOOL_RULES` lists the checks.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from typing import Final

from agentbus_redis.api.request_view import (
    SERVER_TOOL_USE_TYPES,
    ApiViolation,
    Check,
    RequestView,
    location,
    violation,
)

TOOL_ID_PATTERN: Final = re.compile(r"^[a-zA-Z0-9_-]+$")
MAX_TOOL_ID_LENGTH: Final = 64
TOOL_RESULT_CONTENT_TYPES: Final = frozenset({"text", "image", "document", "search_result", "tool_reference"})


def _check_tool_use_has_result(request: RequestView) -> Iterator[ApiViolation]:
    """§1.1/§3.1: every tool_use of assistant message k has a tool_result in user message k+1."""
    for message in request.messages:
        if message.role != "assistant":
            continue
        following = request.neighbour(message, 1)
        answered = set(following.ids("tool_result", "tool_use_id")) if following and following.role == "user" else set()
        missing = [i for i in dict.fromkeys(message.ids("tool_use", "id")) if i not in answered]
        if missing:
            detail = (
                f"{location(message)}: `tool_use` ids were found without `tool_result` blocks immediately after: "
                f"{', '.join(missing)}. Each `tool_use` block must have a corresponding `tool_result` block "
                "in the next message."
            )
            yield violation("tool_use_without_result", message, None, detail)


def _check_tool_result_answers_previous(request: RequestView) -> Iterator[ApiViolation]:
    """§1.2/§3.2: a tool_result answers a tool_use of the immediately preceding assistant message."""
    for message in request.messages:
        if message.role != "user":
            continue
        previous = request.neighbour(message, -1)
        calls = set(previous.ids("tool_use", "id")) if previous and previous.role == "assistant" else set()
        for block in message.of_type("tool_result"):
            tool_use_id = block.str_field("tool_use_id")
            if tool_use_id is not None and tool_use_id not in calls:
                detail = (
                    f"{location(message, block)}: unexpected `tool_use_id` found in `tool_result` blocks: "
                    f"{tool_use_id}. Each `tool_result` block must have a corresponding `tool_use` block "
                    "in the previous message."
                )
                yield violation("orphan_tool_result", message, block, detail)


def _check_single_result_per_tool_use(request: RequestView) -> Iterator[ApiViolation]:
    """§1.4/§3.6: no two tool_result blocks of one message answer the same id."""
    for message in request.messages:
        seen: set[str] = set()
        for block in message.of_type("tool_result"):
            tool_use_id = block.str_field("tool_use_id")
            if tool_use_id in seen:
                detail = (
                    f"{location(message, block)}: each tool_use must have a single result. "
                    f"Found multiple tool_result blocks with id: {tool_use_id}"
                )
                yield violation("duplicate_tool_result", message, block, detail)
            elif tool_use_id is not None:
                seen.add(tool_use_id)


def _check_tool_results_first(request: RequestView) -> Iterator[ApiViolation]:
    """§1.3/§3.1: in a user message all tool_result blocks come before any other block."""
    for message in request.messages:
        if message.role != "user" or "tool_result" not in message.types:
            continue  # nothing to misplace
        kinds = [block.type == "tool_result" for block in message.blocks]
        first_other = kinds.index(False) if False in kinds else len(kinds)
        misplaced = next((k for k in range(first_other, len(kinds)) if kinds[k]), None)
        if message.role != "user" or misplaced is None:
            continue
        previous = request.neighbour(message, -1)
        expected = len(previous.ids("tool_use", "id")) if previous and previous.role == "assistant" else 0
        detail = (
            f"{location(message)}: Did not find {expected or sum(kinds)} `tool_result` block(s) at the beginning "
            "of this message. Messages following `tool_use` blocks must begin with a matching number of "
            "`tool_result` blocks."
        )
        yield violation("tool_result_not_first", message, message.blocks[misplaced], detail)


def _check_tool_use_ids_unique(request: RequestView) -> Iterator[ApiViolation]:
    """§1.4/§3.6: tool_use (and server_tool_use) ids are unique across the whole request."""
    seen: set[str] = set()
    for message in request.messages:
        for block in message.of_type("tool_use", *SERVER_TOOL_USE_TYPES):
            tool_use_id = block.str_field("id")
            if tool_use_id in seen:
                yield violation(
                    "duplicate_tool_use_id",
                    message,
                    block,
                    f"{location(message, block)}: `tool_use` ids must be unique",
                )
            elif tool_use_id is not None:
                seen.add(tool_use_id)


def _check_tool_id_format(request: RequestView) -> Iterator[ApiViolation]:
    """§1.11/§3.8: tool_use.id and tool_result.tool_use_id match ``^[a-zA-Z0-9_-]{1,64}$``."""
    for message in request.messages:
        for block in message.of_type("tool_use", "tool_result"):
            field = "id" if block.type == "tool_use" else "tool_use_id"
            value = block.str_field(field)
            if value is None:
                continue
            if not TOOL_ID_PATTERN.match(value):
                problem = f"String should match pattern '{TOOL_ID_PATTERN.pattern}'"
            elif len(value) > MAX_TOOL_ID_LENGTH:
                problem = f"String should have at most {MAX_TOOL_ID_LENGTH} characters"
            else:
                continue  # the location is spelled out only for a violation: this runs for every id of every request
            yield violation(
                "invalid_tool_id", message, block, f"{location(message, block)}.{block.type}.{field}: {problem}"
            )


def _check_server_tool_results(request: RequestView) -> Iterator[ApiViolation]:
    """§1.2 (server variant), R4.26: a server result follows its server_tool_use in the same assistant message."""
    for message in request.messages:
        if message.role != "assistant":
            continue
        calls: set[str] = set()
        for block in message.blocks:
            if block.type in SERVER_TOOL_USE_TYPES and (call_id := block.str_field("id")) is not None:
                calls.add(call_id)
            result_id = block.str_field("tool_use_id")
            if block.type != "tool_result" and result_id is not None and result_id not in calls:
                detail = (
                    f"{location(message, block)}: unexpected `tool_use_id` found in `{block.type}` blocks: "
                    f"{result_id}. Each `{block.type}` block must have a corresponding `server_tool_use` "
                    "block before it."
                )
                yield violation("orphan_server_tool_result", message, block, detail)


def _check_tool_result_content(request: RequestView) -> Iterator[ApiViolation]:
    """R1.8: tool_result content is a string or a list of text/image/document/search_result/tool_reference."""
    for message in request.messages:
        for block in message.of_type("tool_result"):
            content = block.data.get("content")
            if content is not None and not isinstance(content, str | list):
                detail = (
                    f"{location(message, block)}.tool_result.content: Input should be a valid string or a valid list"
                )
                yield violation("invalid_tool_result_content", message, block, detail)
            for k, item in block.nested():
                item_type = item.get("type") if isinstance(item, Mapping) else None
                if item_type not in TOOL_RESULT_CONTENT_TYPES:
                    detail = (
                        f"{location(message, block)}.tool_result.content.{k}: `{item_type}` blocks are not allowed "
                        "in `tool_result` content"
                    )
                    yield violation("invalid_tool_result_content", message, block, detail)


def _check_error_results_text_only(request: RequestView) -> Iterator[ApiViolation]:
    """R4.19: a tool_result with ``is_error: true`` carries text blocks only (Claude Code's invariant)."""
    for message in request.messages:
        for block in message.of_type("tool_result"):
            other = [k for k, item in block.nested() if not (isinstance(item, Mapping) and item.get("type") == "text")]
            if block.data.get("is_error") is True and other:
                detail = (
                    f"{location(message, block)}: `tool_result` with `is_error: true` must contain only `text` "
                    f"blocks (R4.19), found non-text content at {other}"
                )
                yield violation("error_tool_result_not_text", message, block, detail)


def _check_tool_names_unique(request: RequestView) -> Iterator[ApiViolation]:
    """§1.4: tool definitions have unique names."""
    tools = request.tools if isinstance(request.tools, list) else []
    names = [tool["name"] for tool in tools if isinstance(tool, Mapping) and isinstance(tool.get("name"), str)]
    if len(names) != len(set(names)):
        yield violation("duplicate_tool_name", None, None, "tools: Tool names must be unique.")


TOOL_RULES: Final[tuple[Check, ...]] = (
    _check_tool_use_has_result,
    _check_tool_result_answers_previous,
    _check_single_result_per_tool_use,
    _check_tool_results_first,
    _check_tool_use_ids_unique,
    _check_tool_id_format,
    _check_server_tool_results,
    _check_tool_result_content,
    _check_error_results_text_only,
    _check_tool_names_unique,
)
