"""A defensive, read-only view of a Messages API request, shared by the rule checks of
:mod:`agentbus_redis.api.validation` and :mod:`agentbus_redis.api.tool_rules`.

The request is read as plain mappings (not models) because the checks must report a malformed message
or block instead of failing to parse it: anything that is not a well-formed block is simply absent from
:attr:`RequestMessage.blocks` and reported by the shape checks.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Final, TypeAlias, TypeGuard, get_args

from pydantic import BaseModel, ConfigDict

from agentbus_redis.api.types import ServerToolResultType

THINKING_TYPES: Final = frozenset({"thinking", "redacted_thinking"})
SERVER_TOOL_USE_TYPES: Final = frozenset({"server_tool_use", "mcp_tool_use"})
SERVER_RESULT_TYPES: Final = frozenset(get_args(ServerToolResultType))


class ApiViolation(BaseModel):
    """One broken rule: a stable ``rule`` code, where it is, and the API's own error text when the spec
    quotes one (``messages.{i}.content.{j}: …`` with the real indices)."""

    model_config = ConfigDict(frozen=True)

    rule: str
    message_index: int | None = None
    block_index: int | None = None
    detail: str


@dataclass(slots=True)
class RequestBlock:
    """A well-formed content block: a mapping with a string ``type``. (Read-only by convention, not ``frozen``: a
    frozen dataclass sets each field through ``object.__setattr__``, and every request validated builds one of
    these per block — ``read_request`` took 55 µs for 15 messages frozen, 34 µs not.)"""

    index: int | None
    """Position in ``content``; ``None`` for string content read as one text block (as the API reads it)."""
    data: Mapping[str, object]
    type: str
    """``data["type"]``, read once: every rule check asks for it (tens of times per block and request)."""

    def str_field(self, key: str) -> str | None:
        value = self.data.get(key)
        return value if isinstance(value, str) else None

    def nested(self) -> list[tuple[int, object]]:
        """The items of a ``tool_result``'s list content (empty for every other block)."""
        content = self.data.get("content")
        return list(enumerate(content)) if self.type == "tool_result" and isinstance(content, list) else []


@dataclass(slots=True)
class RequestMessage:
    index: int
    """Position in the request's ``messages`` (what error locations name)."""
    raw: object
    role: str | None
    """``"user"`` or ``"assistant"``; ``None`` for anything else (reported as ``invalid_role``)."""
    blocks: tuple[RequestBlock, ...]
    is_empty: bool
    """Content is ``""`` or ``[]``."""
    types: frozenset[str]
    """The ``type`` of every block: most rules ask ``of_type`` for a type most messages do not hold, which this
    answers without a pass over the blocks (a generator per message and rule was a tenth of a request's build)."""
    position: int = -1
    """Position among the conversation's user/assistant messages (``role: "system"`` messages left out);
    ``index`` when the request has none."""

    def of_type(self, *types: str) -> Sequence[RequestBlock]:
        """The blocks of these types, in order."""
        if self.types.isdisjoint(types):
            return ()
        return [block for block in self.blocks if block.type in types]

    def ids(self, block_type: str, key: str) -> list[str]:
        """The string ``key`` of every ``block_type`` block, in order (e.g. all tool_use ids)."""
        return [i for block in self.of_type(block_type) if (i := block.str_field(key)) is not None]


@dataclass(frozen=True, slots=True)
class RequestView:
    messages_field: object
    messages: tuple[RequestMessage, ...]
    """The conversation: every message except ``role: "system"`` ones, which sit between its turns
    without taking part in the user/assistant rules (today's API, see ``system_messages``)."""
    tools: object
    thinking_enabled: bool | None
    allow_prefill: bool
    system_messages: tuple[RequestMessage, ...] = ()
    """The ``role: "system"`` messages of ``messages`` (the current API's ``BetaSystemMessageParam``)."""

    def neighbour(self, message: RequestMessage, offset: int) -> RequestMessage | None:
        """The conversation message ``offset`` places away (system-role messages are not counted)."""
        position = message.position + offset
        return self.messages[position] if 0 <= position < len(self.messages) else None

    def open_assistant_turn(self) -> list[RequestMessage]:
        """The assistant messages of the turn the request continues: those after the last user message
        that is a new prompt (carries no tool_result). A tool-use loop is one assistant turn for the API
        ("Thinking in tool and multi-turn workflows"). Empty when the request ends on a new prompt."""
        turn: list[RequestMessage] = []
        for message in reversed(self.messages):
            if message.role == "user" and not message.ids("tool_result", "tool_use_id"):
                break
            if message.role == "assistant":
                turn.append(message)
        return turn[::-1]


Check: TypeAlias = Callable[[RequestView], Iterator[ApiViolation]]
"""One rule: yields a violation per place the request breaks it."""


def location(message: RequestMessage, block: RequestBlock | None = None) -> str:
    """The API's location prefix: ``messages.{i}`` or ``messages.{i}.content.{j}``."""
    if block is None or block.index is None:
        return f"messages.{message.index}"
    return f"messages.{message.index}.content.{block.index}"


def violation(rule: str, message: RequestMessage | None, block: RequestBlock | None, detail: str) -> ApiViolation:
    """An :class:`ApiViolation` located at ``message``/``block``."""
    return ApiViolation(
        rule=rule,
        message_index=None if message is None else message.index,
        block_index=None if block is None else block.index,
        detail=detail,
    )


def is_mapping(value: object) -> TypeGuard[Mapping[Any, Any]]:
    """``isinstance(value, Mapping)``, answered first for the plain dicts a built request is made of: the ABC
    check alone was a tenth of a validation."""
    return type(value) is dict or isinstance(value, Mapping)


_NO_TYPES: Final = frozenset[str]()
_TEXT_ONLY: Final = frozenset({"text"})


def read_message(index: int, raw: object, *, position: int | None = None) -> RequestMessage:
    """View one raw message; malformed parts are left out of ``blocks`` (the shape checks report them)."""
    fields: Mapping[str, object] = raw if is_mapping(raw) else {}
    role = fields.get("role")
    content = fields.get("content")
    blocks: tuple[RequestBlock, ...] = ()
    types: frozenset[str] = _NO_TYPES
    if isinstance(content, str) and content:
        blocks = (RequestBlock(None, {"type": "text", "text": content}, "text"),)
        types = _TEXT_ONLY
    elif isinstance(content, list):
        blocks = tuple(
            RequestBlock(j, item, block_type)
            for j, item in enumerate(content)
            if is_mapping(item) and isinstance(block_type := item.get("type"), str)
        )
        types = frozenset([block.type for block in blocks])
    return RequestMessage(
        index=index,
        raw=raw,
        role=role if role in ("user", "assistant") else None,
        blocks=blocks,
        is_empty=content == "" or content == [],
        types=types,
        position=index if position is None else position,
    )


def read_request(body: Mapping[str, object], *, thinking_enabled: bool | None, allow_prefill: bool) -> RequestView:
    """View a request body (``messages`` need not be a list: the shape checks report that)."""
    messages_field = body.get("messages")
    raw_messages: Sequence[object] = messages_field if isinstance(messages_field, list | tuple) else ()
    conversation: list[RequestMessage] = []
    system_messages: list[RequestMessage] = []
    for i, raw in enumerate(raw_messages):
        if is_system_role(raw):
            system_messages.append(read_message(i, raw))
        else:
            conversation.append(read_message(i, raw, position=len(conversation)))
    return RequestView(
        messages_field=messages_field,
        messages=tuple(conversation),
        tools=body.get("tools"),
        thinking_enabled=thinking_enabled,
        allow_prefill=allow_prefill,
        system_messages=tuple(system_messages),
    )


def is_system_role(raw: object) -> bool:
    """A ``role: "system"`` message (``BetaSystemMessageParam``), which today's API accepts in ``messages``."""
    return is_mapping(raw) and raw.get("role") == "system"
