"""The line model of a Claude Code JSONL transcript (R7.3, R7.4).

Every line is one JSON object with a string ``type``:

* message lines (``user``, ``assistant``, ``system``, ``progress``, ``attachment``) are the stored
  :mod:`agentbus_redis.messages.kinds` models, which already carry the transcript envelope;
* a message line its model refuses (an older or newer shape: a missing ``timestamp``, a ``message``
  that is not an object…) but that has a string ``uuid`` is an :class:`OtherMessageLine` of its
  ``type``: kept verbatim and walked through by the chain (R7.14 stores every transcript message by
  uuid, whatever its shape), never sent to the API;
* metadata lines (R7.4) are the small models below, one per kind (one whose fields have other JSON
  types is an :class:`OtherEntryLine`, kept verbatim);
* any other ``type`` (newer Claude Code builds, third-party tools) is an :class:`UnknownLine`, kept
  verbatim.

Reading is lossless: every line that parses dumps back to an equal JSON value. Writing follows
Claude Code's key order (R7.3 for message lines, ``type`` first for metadata lines, R7.4).
"""

from __future__ import annotations

import json
from typing import Annotated, Any, Literal, cast

from pydantic import BeforeValidator, Field, SerializeAsAny, TypeAdapter, ValidationError
from pydantic_core import ErrorDetails

from agentbus_redis.errors import TranscriptLineError
from agentbus_redis.json_types import JsonObject, JsonValue
from agentbus_redis.messages.kinds import (
    STORED_TYPES,
    AssistantMessage,
    AttachmentMessage,
    ProgressMessage,
    SystemMessageChoice,
    UserMessage,
    parse_message,
)
from agentbus_redis.messages.system import SYSTEM_SUBTYPE_TAGS, SystemMessage, SystemMessageBase
from agentbus_redis.transcript.unicode_text import escape_lone_surrogates
from agentbus_redis.wire import ROUTED_ELSEWHERE, CamelModel, only_routed_to, type_literal

TranscriptMessageLine = UserMessage | AssistantMessage | SystemMessage | ProgressMessage | AttachmentMessage
"""A message line: the stored kinds of R1.1 (progress only in files written before its removal, R7.16).
A message line its model refuses is an :class:`OtherMessageLine`."""


class SummaryLine(CamelModel):
    """``summary {leafUuid, summary}``: read only; written by Claude Code before v2.1 (R7.4)."""

    type: Literal["summary"] = "summary"
    leaf_uuid: str | None = None
    summary: str | None = None


class CustomTitleLine(CamelModel):
    type: Literal["custom-title"] = "custom-title"
    session_id: str | None = None
    custom_title: str | None = None


class AiTitleLine(CamelModel):
    type: Literal["ai-title"] = "ai-title"
    session_id: str | None = None
    ai_title: str | None = None


class LastPromptLine(CamelModel):
    """The first meaningful user text of the last turn (R7.4)."""

    type: Literal["last-prompt"] = "last-prompt"
    session_id: str | None = None
    last_prompt: str | None = None


class TaskSummaryLine(CamelModel):
    type: Literal["task-summary"] = "task-summary"
    session_id: str | None = None
    summary: str | None = None
    timestamp: str | None = None


class TagLine(CamelModel):
    type: Literal["tag"] = "tag"
    session_id: str | None = None
    tag: str | None = None


class AgentNameLine(CamelModel):
    type: Literal["agent-name"] = "agent-name"
    session_id: str | None = None
    agent_name: str | None = None


class AgentColorLine(CamelModel):
    type: Literal["agent-color"] = "agent-color"
    session_id: str | None = None
    agent_color: str | None = None


class AgentSettingLine(CamelModel):
    type: Literal["agent-setting"] = "agent-setting"
    session_id: str | None = None
    agent_setting: str | None = None


class ModeLine(CamelModel):
    """``mode``: ``coordinator`` or ``normal``."""

    type: Literal["mode"] = "mode"
    session_id: str | None = None
    mode: str | None = None


class WorktreeStateLine(CamelModel):
    """``worktreeSession`` is an object, or null when the session left its worktree."""

    type: Literal["worktree-state"] = "worktree-state"
    session_id: str | None = None
    worktree_session: JsonValue = None


class PrLinkLine(CamelModel):
    type: Literal["pr-link"] = "pr-link"
    session_id: str | None = None
    pr_number: int | None = None
    pr_url: str | None = None
    pr_repository: str | None = None
    timestamp: str | None = None


class FileHistorySnapshotLine(CamelModel):
    """Keyed by ``messageId`` (the uuid of the user message it belongs to)."""

    type: Literal["file-history-snapshot"] = "file-history-snapshot"
    message_id: str | None = None
    snapshot: JsonValue = None
    is_snapshot_update: bool | None = None


class AttributionSnapshotLine(CamelModel):
    """``{messageId, surface, fileStates, …counts}``; the counts pass through as extras."""

    type: Literal["attribution-snapshot"] = "attribution-snapshot"
    message_id: str | None = None
    surface: JsonValue = None
    file_states: JsonValue = None


class QueueOperationLine(CamelModel):
    """``operation`` is ``enqueue``, ``dequeue``, ``remove``, …"""

    type: Literal["queue-operation"] = "queue-operation"
    operation: str | None = None
    timestamp: str | None = None
    session_id: str | None = None
    content: JsonValue = None


class SpeculationAcceptLine(CamelModel):
    type: Literal["speculation-accept"] = "speculation-accept"
    timestamp: str | None = None
    time_saved_ms: float | None = None


class ContentReplacementLine(CamelModel):
    """Main-thread replacements are keyed by ``sessionId``, a sub-agent's by ``agentId``."""

    type: Literal["content-replacement"] = "content-replacement"
    session_id: str | None = None
    agent_id: str | None = None
    replacements: list[JsonValue] | None = None


class ContextCollapseCommitLine(CamelModel):
    """``marble-origami-commit``: internal context-collapse feature, summarized only (§12)."""

    type: Literal["marble-origami-commit"] = "marble-origami-commit"
    session_id: str | None = None


class ContextCollapseSnapshotLine(CamelModel):
    """``marble-origami-snapshot``: internal context-collapse feature; last one wins."""

    type: Literal["marble-origami-snapshot"] = "marble-origami-snapshot"
    session_id: str | None = None


class OtherMessageLine(CamelModel):
    """A ``user``/``assistant``/``system``/``progress``/``attachment`` line whose model refuses it, kept
    verbatim as a link of the parent chain (R7.14: Claude Code maps every transcript message by uuid,
    whatever its shape, so its children still reach the root through it).

    Only what the chain needs is modelled: ``uuid`` and ``parentUuid`` (a line whose own link is not a
    string stays malformed: it cannot be walked). The envelope read by leaf selection (``timestamp``,
    ``isSidechain``, ``agentId``, ``sessionId``) is read from the extras, ``None`` when absent or of
    another JSON type. Resume drops these lines from the history it returns, as Claude Code's
    normalization drops what the API does not understand; :func:`model_refusal` says why the model
    refused one."""

    type: str
    uuid: str
    parent_uuid: str | None = None

    def _extra_string(self, key: str) -> str | None:
        value = (self.model_extra or {}).get(key)
        return value if isinstance(value, str) else None

    @property
    def timestamp(self) -> str | None:
        return self._extra_string("timestamp")

    @property
    def agent_id(self) -> str | None:
        return self._extra_string("agentId")

    @property
    def session_id(self) -> str | None:
        return self._extra_string("sessionId")

    @property
    def is_sidechain(self) -> bool | None:
        value = (self.model_extra or {}).get("isSidechain")
        return value if isinstance(value, bool) else None


class OtherEntryLine(CamelModel):
    """A metadata line (R7.4) whose fields have other JSON types than its model expects (an older or
    newer build's shape); kept verbatim (so repair never drops it), not loaded into the session maps.
    :func:`model_refusal` says why its model refused it."""

    type: str


class UnknownLine(CamelModel):
    """A line whose ``type`` agentbus does not model; kept verbatim."""

    type: str


MetadataLine = (
    SummaryLine
    | CustomTitleLine
    | AiTitleLine
    | LastPromptLine
    | TaskSummaryLine
    | TagLine
    | AgentNameLine
    | AgentColorLine
    | AgentSettingLine
    | ModeLine
    | WorktreeStateLine
    | PrLinkLine
    | FileHistorySnapshotLine
    | AttributionSnapshotLine
    | QueueOperationLine
    | SpeculationAcceptLine
    | ContentReplacementLine
    | ContextCollapseCommitLine
    | ContextCollapseSnapshotLine
)
"""The metadata entries of R7.4 (no parent chain)."""

_METADATA_MODELS: tuple[type[CamelModel], ...] = (
    SummaryLine,
    CustomTitleLine,
    AiTitleLine,
    LastPromptLine,
    TaskSummaryLine,
    TagLine,
    AgentNameLine,
    AgentColorLine,
    AgentSettingLine,
    ModeLine,
    WorktreeStateLine,
    PrLinkLine,
    FileHistorySnapshotLine,
    AttributionSnapshotLine,
    QueueOperationLine,
    SpeculationAcceptLine,
    ContentReplacementLine,
    ContextCollapseCommitLine,
    ContextCollapseSnapshotLine,
)

_METADATA_MODEL_OF_TYPE: dict[str, type[CamelModel]] = {type_literal(model): model for model in _METADATA_MODELS}
METADATA_TYPES: frozenset[str] = frozenset(_METADATA_MODEL_OF_TYPE)
"""The ``type`` values of R7.4."""


def _other_shape_tag(value: Any) -> str:
    """Route a line of a modelled kind to :class:`OtherMessageLine` or :class:`OtherEntryLine` (tried only
    after its own model failed)."""
    kind = value.get("type") if isinstance(value, dict) else getattr(value, "type", None)
    if kind in STORED_TYPES:
        return "other_message"
    return "other_entry" if kind in METADATA_TYPES else "unmodelled"


def _line_tag(value: Any) -> str:
    """Route a line to its model: message kinds by ``type`` (and system ``subtype``), metadata kinds by
    ``type``, anything else with a string ``type`` to :class:`UnknownLine`."""
    if isinstance(value, dict):
        kind, subtype = value.get("type"), value.get("subtype")
    else:
        kind, subtype = getattr(value, "type", None), getattr(value, "subtype", None)
    if not isinstance(kind, str):
        return "invalid"
    if kind == "system":
        return SYSTEM_SUBTYPE_TAGS.get(subtype, "system:other") if isinstance(subtype, str) else "system:other"
    if kind in STORED_TYPES or kind in METADATA_TYPES:
        return kind
    return "unknown"


_KnownLine = Annotated[
    UserMessage
    | AssistantMessage
    | SystemMessageChoice
    | ProgressMessage
    | AttachmentMessage
    | SummaryLine
    | CustomTitleLine
    | AiTitleLine
    | LastPromptLine
    | TaskSummaryLine
    | TagLine
    | AgentNameLine
    | AgentColorLine
    | AgentSettingLine
    | ModeLine
    | WorktreeStateLine
    | PrLinkLine
    | FileHistorySnapshotLine
    | AttributionSnapshotLine
    | QueueOperationLine
    | SpeculationAcceptLine
    | ContentReplacementLine
    | ContextCollapseCommitLine
    | ContextCollapseSnapshotLine,
    Field(discriminator="type"),
]

# The literal ``type`` is looked up in Rust; OtherMessageLine and OtherEntryLine take a message or
# metadata kind its own model refused, UnknownLine exactly what ``_line_tag`` routes to it (a string
# ``type`` agentbus does not model).
TranscriptLine = Annotated[
    _KnownLine
    | Annotated[OtherMessageLine, BeforeValidator(only_routed_to("other_message", _other_shape_tag))]
    | Annotated[OtherEntryLine, BeforeValidator(only_routed_to("other_entry", _other_shape_tag))]
    | Annotated[UnknownLine, BeforeValidator(only_routed_to("unknown", _line_tag))],
    Field(union_mode="left_to_right"),
    SerializeAsAny(),  # dumped by the value's own model (see wire.py)
]
"""Any transcript line: a stored message, an other-shaped message line, a metadata entry, or an unknown kind."""

TRANSCRIPT_LINE_ADAPTER: TypeAdapter[TranscriptLine] = TypeAdapter(TranscriptLine)
_validate_line_json = TRANSCRIPT_LINE_ADAPTER.validator.validate_json
"""The core validator's own method: ``TypeAdapter.validate_json`` adds microseconds per line in Python."""

_LEADING_ENVELOPE = ("parentUuid", "logicalParentUuid", "isSidechain", "teamName", "agentName", "promptId", "agentId")
_TRAILING_ENVELOPE = ("userType", "entrypoint", "cwd", "sessionId", "version", "gitBranch", "slug")
_OWN_FIELDS_FIRST = ("type", "subtype", "message", "uuid", "timestamp")


def is_message_line(line: TranscriptLine) -> bool:
    """True for user/assistant/system/progress/attachment lines, other-shaped ones included (they carry
    uuid and parentUuid)."""
    return isinstance(
        line,
        UserMessage | AssistantMessage | SystemMessageBase | ProgressMessage | AttachmentMessage | OtherMessageLine,
    )


def is_progress_line(line: TranscriptLine) -> bool:
    """A ``progress`` line, well-formed or not: bridged by R7.16, never a chain participant (R7.6)."""
    return isinstance(line, ProgressMessage) or (isinstance(line, OtherMessageLine) and line.type == "progress")


def model_refusal(line: OtherMessageLine | OtherEntryLine) -> list[str]:
    """The field paths the line's own model refuses (``timestamp``, ``message.content``…), for reports."""
    try:
        if isinstance(line, OtherMessageLine):
            parse_message(line.to_wire())
        else:
            _METADATA_MODEL_OF_TYPE[line.type].model_validate(line.to_wire(), by_alias=True, by_name=False)
    except ValidationError as exc:
        return _error_locations(exc)
    return []


_BRANCH_LABELS = frozenset({"str", "int", "float", "bool", "list", "dict", "none"})


_TYPE_TAGS = frozenset({*STORED_TYPES, *METADATA_TYPES})
_TAG_ERRORS = frozenset({"union_tag_invalid", "union_tag_not_found"})


def _real_errors(error: ValidationError) -> list[ErrorDetails]:
    """The errors of the model each value was routed to. A ``left_to_right`` union of a tagged union
    and a guarded fallback reports both branches: drop the guard's refusal when the value belongs to a
    known model, and the tagged union's "no such tag" when the value went to the fallback."""
    items = error.errors()
    refused = {item["loc"][:-1] for item in items if item["type"] == ROUTED_ELSEWHERE}

    def fallback_taken(item: ErrorDetails) -> bool:
        location = item["loc"]
        return (
            item["type"] in _TAG_ERRORS
            and bool(location)
            and str(location[-1]).startswith("tagged-union[")
            and location[:-1] not in refused
        )

    return [item for item in items if item["type"] != ROUTED_ELSEWHERE and not fallback_taken(item)]


def _error_locations(error: ValidationError) -> list[str]:
    """Dotted field paths of a validation error, without the union tags pydantic puts first (the line
    ``type`` and, for system lines, the ``subtype``)."""
    paths: list[str] = []
    for item in _real_errors(error):
        # Union branch labels (``str``, ``list[tagged-union[…]]``) are pydantic's, not field names.
        location = [str(part) for part in item["loc"]]
        location = [part for part in location if "[" not in part and part not in _BRANCH_LABELS]
        if location and location[0] in _TYPE_TAGS:
            if location[0] == "system" and len(location) > 1 and location[1] in SYSTEM_SUBTYPE_TAGS:
                location = location[1:]
            location = location[1:]
        path = ".".join(location) or "<line>"
        if path not in paths:
            paths.append(path)
    return paths


def _invalid(line_number: int, kind: str, text: str, error: ValidationError) -> TranscriptLineError:
    return TranscriptLineError(
        line_number, kind, text, detail=f"{len(_real_errors(error))} error(s)", locations=_error_locations(error)
    )


_JSON_KIND: dict[type, str] = {
    str: "string",
    int: "number",
    float: "number",
    bool: "boolean",
    list: "array",
    type(None): "null",
}


def _reject_constant(name: str) -> JsonValue:
    """``NaN``/``Infinity`` are not JSON (``JSON.parse`` rejects them); Python would accept them."""
    raise ValueError(f"invalid JSON constant {name}")


def parse_line(text: str, line_number: int) -> TranscriptLine:
    """R7.14 for one line: parse ``text`` (one JSONL line, surrounding whitespace allowed).

    A message line its model refuses is an :class:`OtherMessageLine` when it has a string ``uuid`` (and
    a string or null ``parentUuid``): it stays a link of the chain; a metadata line its model refuses
    is an :class:`OtherEntryLine`. Raises :class:`TranscriptLineError`
    (kinds ``bad_json``, ``not_an_object``, ``missing_type``, ``invalid_message`` for a message line
    without a usable link, ``invalid_entry``) carrying ``line_number`` and the raw text.
    """
    # Fast path: pydantic parses and validates the line in one pass (in Rust). Its JSON parser accepts
    # NaN and Infinity, which JSON.parse (and this reader) reject, so such lines take the checked path;
    # so does every line that fails, to be classified exactly.
    if "NaN" not in text and "Infinity" not in text:
        try:
            return cast("TranscriptLine", _validate_line_json(text, by_alias=True, by_name=False))
        except ValidationError:
            pass
    try:
        value = json.loads(text.strip(), parse_constant=_reject_constant)
    except ValueError as exc:
        raise TranscriptLineError(line_number, "bad_json", text, detail=str(exc)) from exc
    if not isinstance(value, dict):
        detail = f"a JSON {_JSON_KIND.get(type(value), 'value')}, not an object"
        raise TranscriptLineError(line_number, "not_an_object", text, detail=detail)
    if not isinstance(value.get("type"), str):
        raise TranscriptLineError(line_number, "missing_type", text, detail="no string `type` field")
    obj: JsonObject = value
    if obj["type"] in STORED_TYPES:
        try:
            message = parse_message(obj)
        except ValidationError as exc:
            try:
                return OtherMessageLine.model_validate(obj, by_alias=True, by_name=False)
            except ValidationError:
                raise _invalid(line_number, "invalid_message", text, exc) from exc
        # STORED_TYPES only route to the stored kinds, all members of TranscriptLine.
        return cast("TranscriptLine", message)
    try:
        return TRANSCRIPT_LINE_ADAPTER.validate_python(obj, by_alias=True, by_name=False)
    except ValidationError as exc:
        raise _invalid(line_number, "invalid_entry", text, exc) from exc


def _message_key_order(wire: JsonObject) -> JsonObject:
    """R7.3: leading chain fields, then the message's own fields, then the session stamp."""
    ordered: JsonObject = {key: wire[key] for key in _LEADING_ENVELOPE if key in wire}
    ordered.update({key: wire[key] for key in _OWN_FIELDS_FIRST if key in wire})
    ordered.update({key: value for key, value in wire.items() if key not in ordered and key not in _TRAILING_ENVELOPE})
    ordered.update({key: wire[key] for key in _TRAILING_ENVELOPE if key in wire})
    return ordered


def line_to_wire(line: TranscriptLine) -> JsonObject:
    """The JSON object of ``line`` in Claude Code's key order (R7.3 for messages, ``type`` first otherwise)."""
    wire = line.to_wire()
    if is_message_line(line):
        return _message_key_order(wire)
    return {"type": wire["type"], **{key: value for key, value in wire.items() if key != "type"}}


def dump_line(line: TranscriptLine) -> str:
    """Compact JSON of one line (no spaces, non-ASCII kept, like ``JSON.stringify``), without newline.
    Lone surrogates read from ``\\udXXX`` escapes are written back as escapes, so the line encodes as
    UTF-8 (as ``JSON.stringify`` writes them)."""
    return escape_lone_surrogates(json.dumps(line_to_wire(line), ensure_ascii=False, separators=(",", ":")))
