"""Error tree of the pure library. Every error names where the problem is.

    AgentbusError
    ├── InvalidApiRequest          a normalized request breaks a Messages API rule (``.violations``)
    ├── StreamAccumulationError    malformed or out-of-order Anthropic stream events (R9.3)
    ├── ImageSizeError             a base64 image over the API limit (R4.21)
    ├── PairingRepairRequired      strict pairing mode found something to repair (R4.30)
    └── TranscriptError
        ├── TranscriptLineError    one bad JSONL line (``.line_number``, ``.raw``)
        └── BrokenTranscriptChain  a parent chain that cannot be walked (``.uuid``)

Helpers add their own subclasses here, one per failure kind, each carrying the offending ids.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from shared.pairing import PairingReport


class AgentbusError(Exception):
    """Root of every error raised by agentbus' pure library."""


class PairingRepairRequired(AgentbusError):
    """R4.30: strict pairing mode found a tool_use/tool_result mismatch and refuses to repair it
    (a response conditioned on synthetic placeholders is tainted training data). ``report`` is the
    :class:`shared.pairing.PairingReport` of what the repair would have changed."""

    def __init__(self, message: str, *, report: PairingReport) -> None:
        super().__init__(message)
        self.report = report
