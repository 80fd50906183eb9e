"""Pre-pass of ``normalizeMessagesForAPI`` (§4.1): R4.2 drop virtual messages, R4.3 the targeted
media-strip map, R4.4 the filter of kinds that never reach the API."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from agentbus_redis.messages.content import TextBlock
from agentbus_redis.messages.factories import is_synthetic_api_error
from agentbus_redis.messages.kinds import AssistantMessage, AttachmentMessage, Message, UserMessage
from agentbus_redis.messages.system import LocalCommandSystemMessage

_PDF_LIMITS = "max 100 pages, 20MB"  # API_PDF_MAX_PAGES, formatFileSize(PDF_TARGET_RAW_SIZE)
_REQUEST_LIMITS = "max 20MB"

INTERACTIVE_MEDIA_ERRORS: Mapping[str, frozenset[str]] = {
    f"PDF too large ({_PDF_LIMITS}). Double press esc to go back and try again, or use pdftotext to convert "
    "to text first.": frozenset({"document"}),
    "PDF is password protected. Please double press esc to edit your message and try again.": frozenset({"document"}),
    "The PDF file was not valid. Double press esc to go back and try again with a different file.": frozenset(
        {"document"}
    ),
    "Image was too large. Double press esc to go back and try again with a smaller image.": frozenset({"image"}),
    f"Request too large ({_REQUEST_LIMITS}). Double press esc to go back and try with a smaller file.": frozenset(
        {"document", "image"}
    ),
}
"""R4.3: error text of a synthetic API error (interactive session) → block types to strip."""

NON_INTERACTIVE_MEDIA_ERRORS: Mapping[str, frozenset[str]] = {
    f"PDF too large ({_PDF_LIMITS}). Try reading the file a different way (e.g., extract text with "
    "pdftotext).": frozenset({"document"}),
    "PDF is password protected. Try using a CLI tool to extract or convert the PDF.": frozenset({"document"}),
    "The PDF file was not valid. Try converting it to text first (e.g., pdftotext).": frozenset({"document"}),
    "Image was too large. Try resizing the image or using a different approach.": frozenset({"image"}),
    f"Request too large ({_REQUEST_LIMITS}). Try with a smaller file.": frozenset({"document", "image"}),
}
"""R4.3: the same map for a non-interactive (headless/SDK) session."""

ApiBound = UserMessage | AssistantMessage | AttachmentMessage | LocalCommandSystemMessage
"""What survives R4.4 and enters the per-message fold."""


def drop_virtual_messages(messages: Sequence[Message]) -> list[Message]:
    """R4.2: display-only (``isVirtual``) user/assistant messages never reach the API."""
    return [
        message
        for message in messages
        if not (isinstance(message, UserMessage | AssistantMessage) and message.is_virtual)
    ]


def _first_text(message: AssistantMessage) -> str | None:
    content = message.message.content
    if isinstance(content, str) or not content or not isinstance(content[0], TextBlock):
        return None
    return content[0].text


def build_media_strip_targets(messages: Sequence[Message], *, interactive: bool) -> dict[str, frozenset[str]]:
    """R4.3: for every synthetic API error whose first text is a media error, the nearest meta user
    message above it (skipping other synthetic errors, stopping at anything else) becomes a strip
    target: uuid → block types to remove (accumulated when hit twice)."""
    errors = INTERACTIVE_MEDIA_ERRORS if interactive else NON_INTERACTIVE_MEDIA_ERRORS
    targets: dict[str, frozenset[str]] = {}
    for index, message in enumerate(messages):
        if not isinstance(message, AssistantMessage) or not is_synthetic_api_error(message):
            continue
        text = _first_text(message)
        types = errors.get(text) if text else None
        if types is None:
            continue
        for candidate in reversed(messages[:index]):
            if isinstance(candidate, UserMessage) and candidate.is_meta:
                targets[candidate.uuid] = targets.get(candidate.uuid, frozenset()) | types
                break
            if is_synthetic_api_error(candidate):
                continue
            break
    return targets


def filter_api_bound(messages: Sequence[Message]) -> list[ApiBound]:
    """R4.4: drop progress, every system message except ``local_command``, synthetic API errors and
    the control kinds; attachments stay to be converted."""
    kept: list[ApiBound] = []
    for message in messages:
        if isinstance(message, AssistantMessage) and is_synthetic_api_error(message):
            continue
        if isinstance(message, UserMessage | AssistantMessage | AttachmentMessage | LocalCommandSystemMessage):
            kept.append(message)
    return kept
