"""pi's content blocks (P2): text, thinking, image and toolCall, discriminated on ``type``.

Wire names are pi's camelCase (``thinkingSignature``, ``mimeType``); unknown fields and unknown block
types (a newer pi) are kept verbatim, so a session survives a round trip through agentbus.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Discriminator, Field, SerializeAsAny, Tag

from agentbus_redis.json_types import JsonValue
from agentbus_redis.pi.routing import is_string, tag_router
from agentbus_redis.wire import CamelModel


class PiText(CamelModel):
    """P2.1."""

    type: Literal["text"] = "text"
    text: str
    text_signature: str | None = None


class PiThinking(CamelModel):
    """P2.2: ``thinkingSignature`` is the Anthropic signature (``""`` when a stream stopped before it)."""

    type: Literal["thinking"] = "thinking"
    thinking: str
    thinking_signature: str | None = None
    redacted: bool | None = None


class PiImage(CamelModel):
    """P2.3: base64 only, no ``data:`` prefix."""

    type: Literal["image"] = "image"
    data: str
    mime_type: str


class PiToolCall(CamelModel):
    """P2.4: ``arguments`` is the parsed JSON object (partial when the stream was cut)."""

    type: Literal["toolCall"] = "toolCall"
    id: str
    name: str
    arguments: JsonValue = Field(default_factory=dict)
    thought_signature: str | None = None


class PiUnknownBlock(CamelModel):
    """A block type this module does not know, or a known one missing a required field; kept verbatim."""

    type: str | None = None


_block_tag = tag_router(
    "type",
    {
        "text": {"text": is_string},
        "thinking": {"thinking": is_string},
        "image": {"data": is_string, "mimeType": is_string},
        "toolCall": {"id": is_string, "name": is_string},
    },
    "unknown",
    PiUnknownBlock,
)


PiBlock = Annotated[
    Annotated[PiText, Tag("text")]
    | Annotated[PiThinking, Tag("thinking")]
    | Annotated[PiImage, Tag("image")]
    | Annotated[PiToolCall, Tag("toolCall")]
    | Annotated[PiUnknownBlock, Tag("unknown")],
    Discriminator(_block_tag),
    SerializeAsAny(),
]
"""Any pi content block."""
