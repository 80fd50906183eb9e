"""pi's session file lines (P7): the header and every entry type, discriminated on ``type``.

Entry types this module does not know (a newer pi) are kept verbatim as :class:`PiOtherEntry`; they
still carry ``id``/``parentId`` and so stay on the tree (P8.2 walks through them).
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Discriminator, SerializeAsAny, Tag

from agentbus_redis.json_types import JsonValue
from agentbus_redis.pi.content import PiBlock
from agentbus_redis.pi.messages import Number, PiMessage
from agentbus_redis.pi.routing import is_object, present, tag_router
from agentbus_redis.wire import CamelModel


class PiSessionHeader(CamelModel):
    """P7.4: the first line; ``version`` absent means 1. Legacy v1 fields (``provider``, ``modelId``,
    ``thinkingLevel``, ``branchedFrom``) are ignored and kept."""

    type: Literal["session"] = "session"
    version: int | None = None
    id: str
    timestamp: str | None = None
    cwd: str | None = None
    parent_session: str | None = None


class PiEntryBase(CamelModel):
    """P7.5: ``id``/``parentId`` are absent in v1 files until migrated (P7.10)."""

    id: str | None = None
    parent_id: str | None = None
    timestamp: str | None = None


class PiMessageEntry(PiEntryBase):
    type: Literal["message"] = "message"
    message: PiMessage


class PiThinkingLevelChange(PiEntryBase):
    type: Literal["thinking_level_change"] = "thinking_level_change"
    thinking_level: str


class PiModelChange(PiEntryBase):
    type: Literal["model_change"] = "model_change"
    provider: str
    model_id: str


class PiCompaction(PiEntryBase):
    """``firstKeptEntryIndex`` is the v1 form (P7.10), replaced by ``firstKeptEntryId`` on migration."""

    type: Literal["compaction"] = "compaction"
    summary: str
    first_kept_entry_id: str | None = None
    first_kept_entry_index: int | None = None
    tokens_before: Number | None = None
    details: JsonValue = None
    from_hook: bool | None = None


class PiBranchSummaryEntry(PiEntryBase):
    type: Literal["branch_summary"] = "branch_summary"
    from_id: str | None = None
    summary: str = ""
    details: JsonValue = None
    from_hook: bool | None = None


class PiCustomEntry(PiEntryBase):
    """Extension state: never in the context."""

    type: Literal["custom"] = "custom"
    custom_type: str | None = None
    data: JsonValue = None


class PiCustomMessageEntry(PiEntryBase):
    type: Literal["custom_message"] = "custom_message"
    custom_type: str | None = None
    content: str | list[PiBlock]
    display: bool | None = None
    details: JsonValue = None


class PiLabel(PiEntryBase):
    type: Literal["label"] = "label"
    target_id: str | None = None
    label: str | None = None


class PiSessionInfo(PiEntryBase):
    type: Literal["session_info"] = "session_info"
    name: str | None = None


class PiOtherEntry(PiEntryBase):
    """An entry type this module does not model, or a known one missing a required field."""

    type: str | None = None


_entry_tag = tag_router(
    "type",
    {
        "message": {"message": is_object},
        "thinking_level_change": {"thinkingLevel": present},
        "model_change": {"provider": present, "modelId": present},
        "compaction": {"summary": present},
        "branch_summary": {},
        "custom": {},
        "custom_message": {"content": present},
        "label": {},
        "session_info": {},
    },
    "other",
    PiOtherEntry,
)


PiEntry = Annotated[
    Annotated[PiMessageEntry, Tag("message")]
    | Annotated[PiThinkingLevelChange, Tag("thinking_level_change")]
    | Annotated[PiModelChange, Tag("model_change")]
    | Annotated[PiCompaction, Tag("compaction")]
    | Annotated[PiBranchSummaryEntry, Tag("branch_summary")]
    | Annotated[PiCustomEntry, Tag("custom")]
    | Annotated[PiCustomMessageEntry, Tag("custom_message")]
    | Annotated[PiLabel, Tag("label")]
    | Annotated[PiSessionInfo, Tag("session_info")]
    | Annotated[PiOtherEntry, Tag("other")],
    Discriminator(_entry_tag),
    SerializeAsAny(),
]
"""Any non-header line of a pi session file."""
