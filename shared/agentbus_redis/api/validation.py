"""Checks a Messages API request against every rule of anthropic-api-rules.md §1/§3 (plus Claude Code's own
invariants R4.19/R4.21/R4.23) that can be checked without calling the API.

Each rule is one small generator ``_check_*`` yielding :class:`ApiViolation`. Where the spec quotes the
API's error text, ``detail`` reproduces it with the real indices (``messages.{i}.content.{j}``), so a
violation reads exactly like the 400 the request would get. The input is read defensively (plain
mappings, not models): a malformed message or block is itself reported, never a crash.

Thinking rules look at the *open assistant turn*: the assistant messages after the last user message
that is a new prompt (no ``tool_result``). A tool-use loop is one assistant turn for the API (docs
"Thinking in tool and multi-turn workflows"), so only the turn's first message must start with thinking;
later ones in the loop legitimately carry none unless thinking is interleaved.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from typing import Final

from agentbus_redis.api.request_view import (
    SERVER_RESULT_TYPES,
    SERVER_TOOL_USE_TYPES,
    THINKING_TYPES,
    ApiViolation,
    Check,
    RequestBlock,
    RequestMessage,
    RequestView,
    is_mapping,
    location,
    read_request,
    violation,
)
from agentbus_redis.api.tool_rules import TOOL_RULES
from agentbus_redis.api.types import MessagesRequest
from agentbus_redis.errors import AgentbusError


class InvalidApiRequest(AgentbusError):
    """A request breaks Messages API rules (anthropic-api-rules.md §1/§3). ``violations`` lists every
    :class:`agentbus_redis.api.validation.ApiViolation`, each with its message and block index."""

    def __init__(self, violations: Sequence[ApiViolation]) -> None:
        self.violations = tuple(violations)
        shown = "; ".join(f"[{v.rule}] {v.detail}" for v in self.violations[:5])
        more = f"; … and {len(self.violations) - 5} more" if len(self.violations) > 5 else ""
        super().__init__(f"{len(self.violations)} Messages API rule violation(s): {shown}{more}")


MAX_IMAGE_BASE64_LENGTH: Final = 5 * 1024 * 1024
MAX_MEDIA_ITEMS: Final = 100
REDACTED_SIGNATURE_PLACEHOLDERS: Final = frozenset({"[REDACTED_SIGNATURE]"})
"""Signatures scrubbed by transcript exporters (seen in the marot__spotter corpus, §1.10)."""
_THINKING_DOCS = "https://docs.claude.com/en/docs/build-with-claude/extended-thinking"

_REQUIRED_FIELDS: Final[dict[str, tuple[tuple[str, type], ...]]] = {
    "text": (("text", str),),
    "image": (("source", Mapping),),
    "document": (("source", Mapping),),
    "tool_use": (("id", str), ("name", str), ("input", Mapping)),
    "tool_result": (("tool_use_id", str),),
    "thinking": (("thinking", str),),
    **dict.fromkeys(SERVER_TOOL_USE_TYPES, (("id", str), ("name", str))),
    **dict.fromkeys(SERVER_RESULT_TYPES, (("tool_use_id", str),)),
}
_EXPECTED: Final[dict[type, str]] = {str: "a valid string", Mapping: "a valid dictionary"}


# --- shape ------------------------------------------------------------------------------------------


def _check_messages_present(request: RequestView) -> Iterator[ApiViolation]:
    """§1 envelope: ``messages`` is a non-empty list."""
    if not isinstance(request.messages_field, list | tuple):
        yield violation("invalid_messages", None, None, "messages: Input should be a valid list")
    elif not request.messages:
        yield violation("empty_messages", None, None, "messages: at least one message is required")


def _check_message_shape(request: RequestView) -> Iterator[ApiViolation]:
    """Each message is an object with role user/assistant (system: ``_check_system_messages``) and string
    or list content."""
    for message in request.messages:
        if not is_mapping(message.raw):
            yield violation(
                "invalid_message", message, None, f"{location(message)}: Input should be a valid dictionary"
            )
            continue
        if message.role is None:
            detail = f"{location(message)}.role: Input should be 'user', 'assistant' or 'system'"
            yield violation("invalid_role", message, None, detail)
        if not isinstance(message.raw.get("content"), str | list):
            detail = f"{location(message)}.content: Input should be a valid string or a valid list"
            yield violation("invalid_content", message, None, detail)


def _check_block_shape(request: RequestView) -> Iterator[ApiViolation]:
    """Unknown block types pass through, but every block is an object with a string ``type``."""
    for message in request.messages:
        content = message.raw.get("content") if is_mapping(message.raw) else None
        if not isinstance(content, list) or len(content) == len(message.blocks):
            continue  # ``blocks`` holds exactly the well-formed items: all of them are
        for j, item in enumerate(content if isinstance(content, list) else []):
            if not isinstance(item, Mapping) or not isinstance(item.get("type"), str):
                detail = f"messages.{message.index}.content.{j}: a content block must be an object with a string `type`"
                yield ApiViolation(rule="invalid_block", message_index=message.index, block_index=j, detail=detail)


def _check_required_fields(request: RequestView) -> Iterator[ApiViolation]:
    """Known block types carry their mandatory fields (text.text, tool_use.id/name/input, …)."""
    for message in request.messages:
        for block in message.blocks:
            for field, expected in _REQUIRED_FIELDS.get(block.type, ()):
                value = block.data.get(field)
                if not isinstance(value, expected):
                    problem = "Field required" if value is None else f"Input should be {_EXPECTED[expected]}"
                    detail = f"{location(message, block)}.{block.type}.{field}: {problem}"
                    yield violation("missing_field", message, block, detail)


# --- roles and emptiness (§1.5, §1.6, §1.7, §1.9) ---------------------------------------------------


def _check_first_message_user(request: RequestView) -> Iterator[ApiViolation]:
    """§1.6: the first message uses the user role."""
    if request.messages and request.messages[0].role == "assistant":
        yield violation(
            "first_message_not_user", request.messages[0], None, 'messages: first message must use the "user" role'
        )


def _check_roles_alternate(request: RequestView) -> Iterator[ApiViolation]:
    """§1.5/§3.4: agentbus always merges same-role runs, so consecutive same roles are a violation."""
    for previous, message in zip(request.messages, request.messages[1:], strict=False):
        if message.role is not None and message.role == previous.role:
            detail = (
                f'messages: roles must alternate between "user" and "assistant", '
                f'but found multiple "{message.role}" roles in a row'
            )
            yield violation("roles_not_alternating", message, None, detail)


def _check_non_empty_content(request: RequestView) -> Iterator[ApiViolation]:
    """§1.7: every message has content, except an optional final assistant message (prefill)."""
    for message in request.messages:
        is_prefill = message.role == "assistant" and message.position == len(request.messages) - 1
        if message.is_empty and not is_prefill:
            detail = (
                f"{location(message)}: all messages must have non-empty content "
                "except for the optional final assistant message"
            )
            yield violation("empty_content", message, None, detail)


def _check_ends_on_user(request: RequestView) -> Iterator[ApiViolation]:
    """§1.9/§3.5: Claude ≥4.6 rejects prefill, so unless allowed the request ends on a user message."""
    if request.messages and request.messages[-1].role == "assistant" and not request.allow_prefill:
        detail = "This model does not support assistant message prefill. The conversation must end with a user message."
        yield violation("prefill_not_supported", request.messages[-1], None, detail)


# --- text (§1.8, §1.9) ------------------------------------------------------------------------------


def _check_text_not_blank(request: RequestView) -> Iterator[ApiViolation]:
    """§1.8: text blocks are non-empty and not whitespace-only (string content counts as one text block)."""
    for message in request.messages:
        for block in message.of_type("text"):
            text = block.str_field("text")
            if text == "":
                yield violation("empty_text", message, block, "messages: text content blocks must be non-empty")
            elif text is not None and not text.strip():
                detail = "messages: text content blocks must contain non-whitespace text"
                yield violation("whitespace_text", message, block, detail)


def _check_final_assistant_trailing_whitespace(request: RequestView) -> Iterator[ApiViolation]:
    """§1.9: a final assistant message (prefill) must not end with whitespace."""
    final = request.messages[-1] if request.messages else None
    if final is None or final.role != "assistant" or not final.blocks or final.blocks[-1].type != "text":
        return
    text = final.blocks[-1].str_field("text")
    if text and text.strip() and text != text.rstrip():
        detail = "messages: final assistant content cannot end with trailing whitespace"
        yield violation("final_assistant_trailing_whitespace", final, final.blocks[-1], detail)


# --- block placement by role (§1.3, R1.8) -----------------------------------------------------------


_ROLE_OF_BLOCK: Final = {
    "tool_use": ("assistant", "tool_use_in_user_message"),
    "tool_result": ("user", "tool_result_in_assistant_message"),
    "thinking": ("assistant", "thinking_in_user_message"),
    "redacted_thinking": ("assistant", "thinking_in_user_message"),
}


def _check_block_roles(request: RequestView) -> Iterator[ApiViolation]:
    """R1.8: tool_use and thinking only in assistant messages, tool_result only in user messages."""
    for message in request.messages:
        for block in message.of_type(*_ROLE_OF_BLOCK):
            role, rule = _ROLE_OF_BLOCK[block.type]
            if message.role is not None and message.role != role:
                detail = f"{location(message, block)}: `{block.type}` blocks are only allowed in `{role}` messages"
                yield violation(rule, message, block, detail)


# --- thinking (§1.10, §3.7) -------------------------------------------------------------------------


def _check_thinking_signed(request: RequestView) -> Iterator[ApiViolation]:
    """§1.10/§3.7: thinking carries a real signature; redacted_thinking carries its data."""
    for message in request.messages:
        for block in message.of_type(*THINKING_TYPES):
            field = "signature" if block.type == "thinking" else "data"
            value = block.data.get(field)
            if value is None:
                detail = f"{location(message, block)}.{block.type}.{field}: Field required"
            elif block.type == "thinking" and (
                not isinstance(value, str) or not value.strip() or value in REDACTED_SIGNATURE_PLACEHOLDERS
            ):
                detail = f"{location(message, block)}: Invalid `signature` in `thinking` block"
            elif block.type == "redacted_thinking" and (not isinstance(value, str) or not value):
                detail = f"{location(message, block)}.redacted_thinking.data: `data` must be a non-empty string"
            else:
                continue
            rule = "unsigned_thinking" if block.type == "thinking" else "redacted_thinking_without_data"
            yield violation(rule, message, block, detail)


def _check_thinking_starts_open_turn(request: RequestView) -> Iterator[ApiViolation]:
    """§1.10: with thinking enabled, the assistant turn holding the lastmost tool_use starts with thinking."""
    turn = request.open_assistant_turn()
    if request.thinking_enabled is not True or not any(m.ids("tool_use", "id") for m in turn):
        return
    first = turn[0]
    found = first.blocks[0].type if first.blocks else "nothing"
    if found not in THINKING_TYPES:
        detail = (
            f"messages.{first.index}.content.0.type: Expected `thinking` or `redacted_thinking`, but found "
            f"`{found}`. When `thinking` is enabled, a final `assistant` message must start with a thinking "
            "block (preceeding the lastmost set of `tool_use` and `tool_result` blocks). We recommend you "
            "include thinking blocks from previous turns. To avoid this requirement, disable `thinking`. "
            f"Please consult our documentation at {_THINKING_DOCS}"
        )
        yield violation("missing_leading_thinking", first, first.blocks[0] if first.blocks else None, detail)


def _check_no_thinking_when_disabled(request: RequestView) -> Iterator[ApiViolation]:
    """§1.10: with thinking disabled, the final assistant turn carries no thinking blocks."""
    if request.thinking_enabled is not False:
        return
    for message in request.open_assistant_turn():
        for block in message.of_type(*THINKING_TYPES):
            detail = (
                f"{location(message, block)}: When thinking is disabled, an `assistant` message in the final "
                "position cannot contain `thinking`. To use thinking blocks, enable `thinking` in your request."
            )
            yield violation("thinking_while_disabled", message, block, detail)


# --- media (R4.21, R4.23) ---------------------------------------------------------------------------

MEDIA_BLOCK_TYPES: Final = ("image", "document")


def _media(request: RequestView) -> Iterator[tuple[RequestMessage, RequestBlock, str, Mapping[str, object]]]:
    """Every image/document with its location path, top level and inside tool_result content (walked with no
    list built per block: two checks run this over every block of every request)."""
    for message in request.messages:
        for block in message.blocks:
            if block.type in MEDIA_BLOCK_TYPES:
                yield message, block, "", block.data
            elif block.type == "tool_result" and isinstance(content := block.data.get("content"), list):
                for k, item in enumerate(content):
                    if isinstance(item, Mapping) and item.get("type") in MEDIA_BLOCK_TYPES:
                        yield message, block, f".tool_result.content.{k}", item


def _check_image_size(request: RequestView) -> Iterator[ApiViolation]:
    """R4.21: a base64 image is at most 5 MiB of base64 text."""
    for message, block, path, item in _media(request):
        source = item.get("source")
        data = source.get("data") if isinstance(source, Mapping) and source.get("type") == "base64" else None
        if item.get("type") == "image" and isinstance(data, str) and len(data) > MAX_IMAGE_BASE64_LENGTH:
            detail = (
                f"{location(message, block)}{path}.image.source.base64: image exceeds 5 MB maximum: "
                f"{len(data)} bytes > {MAX_IMAGE_BASE64_LENGTH} bytes"
            )
            yield violation("image_too_large", message, block, detail)


def _check_media_count(request: RequestView) -> Iterator[ApiViolation]:
    """R4.23: at most 100 images and documents in the whole request (reported at the first one too many)."""
    media = list(_media(request))
    if len(media) > MAX_MEDIA_ITEMS:
        images = sum(1 for *_, item in media if item.get("type") == "image")
        message, block, _, _ = media[MAX_MEDIA_ITEMS]
        detail = f"too many images and documents: {images} + {len(media) - images} > {MAX_MEDIA_ITEMS}"
        yield violation("too_many_media", message, block, detail)


# --- role: "system" messages (today's API; not in anthropic-api-rules.md §1) -------------------------

SYSTEM_MESSAGE_FIELDS: Final = frozenset({"role", "content", "clear_at", "output_config"})
"""``BetaSystemMessageParam`` (anthropic SDK 2.13, beta ``per-turn-control-2026-07-01``)."""
SYSTEM_BLOCK_TYPES: Final = frozenset({"text", "tool_addition", "tool_removal"})
CLEAR_AT_VALUES: Final = frozenset({"next_user_message", "never"})
EFFORT_VALUES: Final = frozenset({"low", "medium", "high", "xhigh", "max"})


def _check_system_messages(request: RequestView) -> Iterator[ApiViolation]:
    """A ``role: "system"`` message in ``messages`` as today's API takes it (the anthropic SDK's
    ``BetaSystemMessageParam``, sent by Claude Code 2.1.332; the spec's §1.6 "roles are user or assistant"
    predates it, and the client and SDK win): string content or text / ``tool_addition`` /
    ``tool_removal`` blocks, optional ``clear_at`` and per-turn ``output_config``, and never neither
    content nor ``output_config``."""
    for message in request.system_messages:
        raw = message.raw
        assert isinstance(raw, Mapping)  # read_request only routes mappings here
        where = location(message)
        for key in sorted(set(raw) - SYSTEM_MESSAGE_FIELDS):
            yield violation("invalid_system_message", message, None, f"{where}.{key}: Extra inputs are not permitted")
        content = raw.get("content", "")
        if not isinstance(content, str | list):
            yield violation(
                "invalid_content", message, None, f"{where}.content: Input should be a valid string or a valid list"
            )
        for j, item in enumerate(content if isinstance(content, list) else []):
            kind = item.get("type") if isinstance(item, Mapping) else None
            if kind not in SYSTEM_BLOCK_TYPES:
                yield ApiViolation(
                    rule="invalid_block",
                    message_index=message.index,
                    block_index=j,
                    detail=f"{where}.content.{j}: a system message holds text, tool_addition or tool_removal blocks",
                )
            elif kind == "text" and not isinstance(item.get("text"), str):
                yield ApiViolation(
                    rule="missing_field",
                    message_index=message.index,
                    block_index=j,
                    detail=f"{where}.content.{j}.text.text: Field required",
                )
        clear_at = raw.get("clear_at")
        if clear_at is not None and clear_at not in CLEAR_AT_VALUES:
            detail = f"{where}.clear_at: Input should be 'next_user_message' or 'never'"
            yield violation("invalid_system_message", message, None, detail)
        output_config = raw.get("output_config")
        if output_config is not None and not isinstance(output_config, Mapping):
            yield violation(
                "invalid_system_message", message, None, f"{where}.output_config: Input should be a valid dictionary"
            )
        elif isinstance(output_config, Mapping) and output_config.get("effort") not in (None, *EFFORT_VALUES):
            detail = f"{where}.output_config.effort: Input should be 'low', 'medium', 'high', 'xhigh' or 'max'"
            yield violation("invalid_system_message", message, None, detail)
        if message.is_empty and output_config is None:
            detail = f"{where}: a system message needs content or output_config"
            yield violation("empty_system_message", message, None, detail)


_CHECKS: Final[tuple[Check, ...]] = (
    _check_messages_present,
    _check_message_shape,
    _check_block_shape,
    _check_required_fields,
    _check_first_message_user,
    _check_roles_alternate,
    _check_non_empty_content,
    _check_ends_on_user,
    _check_text_not_blank,
    _check_final_assistant_trailing_whitespace,
    _check_block_roles,
    *TOOL_RULES,
    _check_thinking_signed,
    _check_thinking_starts_open_turn,
    _check_no_thinking_when_disabled,
    _check_image_size,
    _check_media_count,
    _check_system_messages,
)


def _thinking_from_config(config: object) -> bool | None:
    """``enabled`` → True, ``disabled``/absent → False, ``adaptive``/unknown → None (the model may skip
    thinking under adaptive, so neither thinking-mode rule is known to apply)."""
    if config is None:
        return False
    kind = config.get("type") if isinstance(config, Mapping) else None
    return {"enabled": True, "disabled": False}.get(kind) if isinstance(kind, str) else None


def validate_api_request(
    request: MessagesRequest | Sequence[Mapping[str, object]],
    *,
    thinking_enabled: bool | None = None,
    allow_prefill: bool = False,
) -> list[ApiViolation]:
    """Every rule the request breaks, sorted by (message_index, block_index); empty when it is valid.

    ``request`` is a full request body or just its ``messages`` list. ``thinking_enabled=None`` takes the
    request's ``thinking`` config when a full body is given (absent = disabled) and otherwise skips the two
    thinking-mode rules. ``allow_prefill`` admits a final assistant message (models before Claude 4.6).
    """
    body: Mapping[str, object] = request if isinstance(request, Mapping) else {"messages": list(request)}
    if thinking_enabled is None and isinstance(request, Mapping):
        thinking_enabled = _thinking_from_config(body.get("thinking"))
    view = read_request(body, thinking_enabled=thinking_enabled, allow_prefill=allow_prefill)
    found = [found_violation for check in _CHECKS for found_violation in check(view)]
    if not found:
        return found  # the usual answer: no sort to set up
    return sorted(
        found,
        key=lambda v: (
            -1 if v.message_index is None else v.message_index,
            -1 if v.block_index is None else v.block_index,
        ),
    )


def assert_valid_api_request(
    request: MessagesRequest | Sequence[Mapping[str, object]],
    *,
    thinking_enabled: bool | None = None,
    allow_prefill: bool = False,
) -> None:
    """Raise :class:`InvalidApiRequest` listing every violation when the request breaks any rule."""
    violations = validate_api_request(request, thinking_enabled=thinking_enabled, allow_prefill=allow_prefill)
    if violations:
        raise InvalidApiRequest(violations)


__all__ = [
    "ApiViolation",
    "InvalidApiRequest",
    "assert_valid_api_request",
    "validate_api_request",
]
