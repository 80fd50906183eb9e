"""R9.7 ``normalizeContentFromAPI``: the content blocks of an API response as agentbus stores them.

Used for every finished streamed block (R9.4) and for a non-streaming fallback response (R9.9).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any, NoReturn

from pydantic import ValidationError

from agentbus_redis.clock import Clock, utc_now
from agentbus_redis.errors import ContentNormalizationError
from agentbus_redis.ids import IdSource, random_uuid
from agentbus_redis.json_types import JsonValue
from agentbus_redis.messages.content import CONTENT_BLOCK_ADAPTER, ContentBlock
from agentbus_redis.messages.kinds import AssistantMessage, AssistantPayload


def _reject_constant(name: str) -> NoReturn:
    raise ValueError(f"{name} is not JSON")


def _parse_tool_input(raw: str) -> JsonValue:
    """``JSON.parse`` or ``{}``: a parse failure, ``""`` and ``null`` all give an empty object (R9.7)."""
    try:
        parsed: JsonValue = json.loads(raw, parse_constant=_reject_constant)
    except ValueError:
        return {}
    return {} if parsed is None else parsed


def normalize_content_from_api(blocks: Sequence[Mapping[str, Any]]) -> list[ContentBlock]:
    """R9.7: a ``tool_use`` input given as a string (how streaming delivers it) is JSON-parsed, a
    failure or ``""`` becoming ``{}``; an object input is kept; any other input raises
    :class:`ContentNormalizationError`. A ``server_tool_use`` string input is parsed the same way.
    Text blocks stay unchanged even when blank (R4.16 removes them later on the API path); every other
    block passes through. Claude Code's tool-specific input corrections need the tool registry and are
    not applied here."""
    result: list[ContentBlock] = []
    for index, block in enumerate(blocks):
        normalized = dict(block)
        kind = normalized.get("type")
        raw_input = normalized.get("input")
        if kind == "tool_use":
            if isinstance(raw_input, str):
                normalized["input"] = _parse_tool_input(raw_input)
            elif not isinstance(raw_input, dict):
                reason = f"tool_use input must be a string or an object, got {type(raw_input).__name__}"
                raise ContentNormalizationError(reason, block_index=index)
        elif kind == "server_tool_use" and isinstance(raw_input, str):
            normalized["input"] = _parse_tool_input(raw_input)
        try:
            result.append(CONTENT_BLOCK_ADAPTER.validate_python(normalized))
        except ValidationError as error:
            raise ContentNormalizationError(f"invalid block: {error}", block_index=index) from error
    return result


def assistant_from_api_response(
    response: Mapping[str, Any],
    *,
    request_id: str | None = None,
    advisor_model: str | None = None,
    clock: Clock = utc_now,
    ids: IdSource = random_uuid,
) -> AssistantMessage:
    """R9.9: the result of the non-streaming fallback request becomes **one** assistant message
    holding all blocks (``message`` = the response with its content normalized, R9.7), with the
    request id of the failed stream and a fresh uuid and timestamp. A response whose fields have the
    wrong JSON types raises ``pydantic.ValidationError`` (with the failing location)."""
    content = response.get("content")
    if not isinstance(content, list) or not all(isinstance(block, dict) for block in content):
        raise ContentNormalizationError("response 'content' is not a list of objects", block_index=0)
    fields: dict[str, str] = {}
    if request_id is not None:
        fields["request_id"] = request_id
    if advisor_model:
        fields["advisor_model"] = advisor_model
    return AssistantMessage(
        type="assistant",
        message=AssistantPayload.model_validate({**response, "content": normalize_content_from_api(content)}),
        uuid=ids(),
        timestamp=clock(),
        **fields,
    )
