"""Error tree of the pure library. Every error names where the problem is.

    AgentbusError
    ├── InvalidApiRequest          a normalized request breaks a Messages API rule (``.violations``; api.validation)
    ├── StreamAccumulationError    malformed or out-of-order Anthropic stream events (R9.3)
    ├── ImageSizeError             a base64 image over the API limit (R4.21)
    ├── PairingRepairRequired      strict pairing mode found something to repair (R4.30; messages.pairing)
    └── TranscriptError
        ├── TranscriptLineError    one bad JSONL line (``.line_number``, ``.raw``)
        ├── BrokenTranscriptChain  a parent chain that cannot be walked (``.uuid``)
        └── UnusableTranscript     a file that is no transcript, or holds no conversation (``.kind``)

Helpers add their own subclasses here, one per failure kind, each carrying the offending ids. An error that
carries a room's own type is defined in that room (the two marked above), so this module imports no room.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, NamedTuple

if TYPE_CHECKING:
    from collections.abc import Sequence


class AgentbusError(Exception):
    """Root of every error raised by agentbus' pure library."""


class OversizedImage(NamedTuple):
    """One base64 image over the API limit (R4.21), located in the normalized list."""

    image_number: int
    """1-based count of base64 images across the user messages (Claude Code's numbering)."""
    size: int
    """Length of the base64 string (the API limit applies to the encoded length)."""
    message_uuid: str
    block_index: int


class ImageSizeError(AgentbusError):
    """R4.21: a base64 image in a user message is longer than the API accepts; the whole call fails
    (the query loop turns this into an API error message and ends the turn with ``image_error``)."""

    def __init__(self, oversized: Sequence[OversizedImage], *, limit: int) -> None:
        self.oversized = tuple(oversized)
        self.limit = limit
        listed = ", ".join(
            f"image {image.image_number} ({image.size} base64 chars, message {image.message_uuid}"
            f" block {image.block_index})"
            for image in self.oversized
        )
        super().__init__(f"{len(self.oversized)} image(s) exceed the {limit}-char base64 limit: {listed}")


class TranscriptError(AgentbusError):
    """Something about a Claude Code JSONL transcript (§7) that cannot be read as specified."""


class TranscriptLineError(TranscriptError):
    """R7.14: one JSONL line that is not a usable entry. Claude Code skips such lines silently;
    agentbus keeps them as values so nothing is lost without a trace.

    ``kind`` says why: ``bad_json`` (undecodable bytes are read as U+FFFD first, with a warning),
    ``not_an_object`` (a JSON string, number, array…), ``missing_type`` (an object without a string ``type``),
    ``invalid_message`` (a user/assistant/system/progress/attachment line that fails the message
    model; ``locations`` lists the failing field paths) or ``invalid_entry`` (a metadata line whose
    fields have the wrong JSON types). ``raw`` is the line text; ``torn`` marks the last line of a
    file that ends without a newline (a write cut short by a crash)."""

    def __init__(
        self,
        line_number: int,
        kind: str,
        raw: str,
        *,
        detail: str = "",
        locations: Sequence[str] = (),
        torn: bool = False,
    ) -> None:
        self.line_number = line_number
        self.kind = kind
        self.raw = raw
        self.detail = detail
        self.locations = tuple(locations)
        self.torn = torn
        where = f" at {', '.join(self.locations)}" if self.locations else ""
        suffix = f": {detail}" if detail else ""
        super().__init__(f"line {line_number}: {kind}{where}{suffix}")


class BrokenTranscriptChain(TranscriptError):
    """A parent chain that cannot be walked: ``uuid`` names the message that was asked for (or
    pointed at) but is not in the transcript."""

    def __init__(self, uuid: str, message: str) -> None:
        self.uuid = uuid
        super().__init__(message)


class UnusableTranscript(TranscriptError):
    """A file that cannot stand for a session: ``kind`` is ``empty`` (no line at all), ``binary`` (its
    first line is not UTF-8 text), ``not_jsonl`` (no line is a JSON object with a ``type``) or
    ``no_conversation`` (valid lines, but no user or assistant message to resume). ``line_number`` is
    the 1-based line that shows it (None for ``empty``/``no_conversation``), ``reason`` says why in
    words. Commands that would otherwise print an empty result refuse such a file with this error."""

    def __init__(self, kind: str, reason: str, *, line_number: int | None = None) -> None:
        self.kind = kind
        self.reason = reason
        self.line_number = line_number
        super().__init__(f"line {line_number}: {reason}" if line_number is not None else reason)


class StreamAccumulationError(AgentbusError):
    """R9.3: an Anthropic stream event that cannot be accumulated (malformed, out of order, a delta for
    a missing block or of the wrong kind). ``event_index`` is the 0-based position of the offending
    event in the stream, ``event_type`` its ``type`` (None when it has none), ``reason`` what is wrong."""

    def __init__(self, reason: str, *, event_index: int, event_type: str | None) -> None:
        self.reason = reason
        self.event_index = event_index
        self.event_type = event_type
        kind = f" ({event_type})" if event_type is not None else ""
        super().__init__(f"stream event #{event_index}{kind}: {reason}")


class ContentNormalizationError(AgentbusError):
    """R9.7: a content block from the API that cannot be normalized (e.g. a tool_use whose ``input``
    is neither a JSON string nor an object). ``block_index`` is its position in the block list."""

    def __init__(self, reason: str, *, block_index: int) -> None:
        self.reason = reason
        self.block_index = block_index
        super().__init__(f"content block {block_index}: {reason}")


class UpdateTargetMissing(AgentbusError):
    """An in-place update (R9.5 usage/stop_reason) names an assistant message ``uuid`` that is not in
    the list it is applied to."""

    def __init__(self, uuid: str) -> None:
        self.uuid = uuid
        super().__init__(f"no assistant message with uuid {uuid} to update")


class InvalidPermissionRule(AgentbusError):
    """A permission rule string (Claude Code syntax, e.g. ``Bash(git status:*)``) that does not parse.
    ``rule`` is the text as given, ``reason`` what is wrong, ``behavior`` the list it came from
    (allow/deny/ask, when known) and ``index`` its position in that list (when known)."""

    def __init__(self, rule: str, reason: str, *, behavior: str | None = None, index: int | None = None) -> None:
        self.rule = rule
        self.reason = reason
        self.behavior = behavior
        self.index = index
        where = f"{behavior}[{index}] " if behavior is not None and index is not None else ""
        super().__init__(f"invalid permission rule {where}{rule!r}: {reason}")
