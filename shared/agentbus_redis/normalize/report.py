"""The typed record of every repair the pipeline made (pure code reports; services log and count)."""

from __future__ import annotations

from collections.abc import Sequence
from enum import StrEnum

from pydantic import BaseModel, ConfigDict

from agentbus_redis.messages.kinds import ApiMessage
from agentbus_redis.messages.pairing import PairingReport


class RepairKind(StrEnum):
    """What a repair did; the value is the metric label."""

    # Claude Code's own passes (R4.1–R4.23).
    MEDIA_STRIPPED_AFTER_ERROR = "media_stripped_after_error"
    TOOL_REFERENCE_REMOVED = "tool_reference_removed"
    TOOL_NAME_CANONICALIZED = "tool_name_canonicalized"
    TOOL_INPUT_NORMALIZED = "tool_input_normalized"
    TOOL_USE_EXTRA_KEYS_DROPPED = "tool_use_extra_keys_dropped"
    ATTACHMENT_UNCONVERTED = "attachment_unconverted"
    ORPHANED_THINKING_DROPPED = "orphaned_thinking_dropped"
    TRAILING_THINKING_DROPPED = "trailing_thinking_dropped"
    WHITESPACE_ASSISTANT_DROPPED = "whitespace_assistant_dropped"
    EMPTY_ASSISTANT_FILLED = "empty_assistant_filled"
    ERROR_TOOL_RESULT_SANITIZED = "error_tool_result_sanitized"
    ADVISOR_BLOCK_STRIPPED = "advisor_block_stripped"
    EXCESS_MEDIA_STRIPPED = "excess_media_stripped"
    # ensure_tool_result_pairing (R4.25–R4.29).
    PLACEHOLDER_TOOL_RESULT_INSERTED = "placeholder_tool_result_inserted"
    ORPHAN_TOOL_RESULT_DROPPED = "orphan_tool_result_dropped"
    DUPLICATE_TOOL_USE_DROPPED = "duplicate_tool_use_dropped"
    DUPLICATE_TOOL_RESULT_DROPPED = "duplicate_tool_result_dropped"
    SERVER_TOOL_USE_DROPPED = "server_tool_use_dropped"
    TOOL_USE_INTERRUPTED = "tool_use_interrupted"
    ORPHAN_MESSAGE_DROPPED = "orphan_message_dropped"
    RESULT_MESSAGE_EMPTIED = "result_message_emptied"
    PLACEHOLDER_MESSAGE_INSERTED = "placeholder_message_inserted"
    # Beyond Claude Code (api_safety).
    MALFORMED_BLOCK_DROPPED = "malformed_block_dropped"
    UNSUPPORTED_BLOCK_DROPPED = "unsupported_block_dropped"
    TOOL_INPUT_COERCED = "tool_input_coerced"
    BLANK_TEXT_DROPPED = "blank_text_dropped"
    THINKING_DROPPED = "thinking_dropped"
    TOOL_ID_REWRITTEN = "tool_id_rewritten"
    TOOL_RESULTS_HOISTED = "tool_results_hoisted"
    EMPTY_USER_FILLED = "empty_user_filled"
    EMPTY_ASSISTANT_DROPPED = "empty_assistant_dropped"
    USER_MESSAGES_MERGED = "user_messages_merged"
    ASSISTANT_MESSAGES_MERGED = "assistant_messages_merged"
    LEADING_USER_INSERTED = "leading_user_inserted"
    TRAILING_WHITESPACE_TRIMMED = "trailing_whitespace_trimmed"


class Repair(BaseModel):
    """One change, located by the uuid of the message it touched."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    kind: RepairKind
    rule: str
    """The spec rule (``R4.16``) or the API rule section (``API §1.8``) the repair enforces."""
    message_uuid: str | None = None
    tool_use_id: str | None = None
    detail: str = ""


class NormalizationReport(BaseModel):
    """Every repair of one normalization, in pipeline order."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    repairs: tuple[Repair, ...] = ()
    pairing: PairingReport | None = None
    """The raw report of ``ensure_tool_result_pairing`` (its repairs are also in ``repairs``)."""

    @property
    def counts(self) -> dict[str, int]:
        """Repairs by kind (metric label → count), kinds in the order first seen."""
        counts: dict[str, int] = {}
        for repair in self.repairs:  # most requests have none: no Counter built for them
            kind = repair.kind.value
            counts[kind] = counts.get(kind, 0) + 1
        return counts

    def count(self, kind: RepairKind) -> int:
        """How many repairs of ``kind`` were made."""
        return sum(1 for repair in self.repairs if repair.kind is kind)

    def of_kind(self, kind: RepairKind) -> tuple[Repair, ...]:
        """The repairs of ``kind``, in order."""
        return tuple(repair for repair in self.repairs if repair.kind is kind)

    def extended(self, repairs: Sequence[Repair], *, pairing: PairingReport | None = None) -> NormalizationReport:
        """This report with ``repairs`` appended (and the pairing report set, when given)."""
        return NormalizationReport(
            repairs=(*self.repairs, *repairs), pairing=pairing if pairing is not None else self.pairing
        )


Repairs = list[Repair]
"""What a pass returns beside its messages."""

PassResult = tuple[list[ApiMessage], Repairs]
"""A pass's output: the new message list and the repairs it made."""
