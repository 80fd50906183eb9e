"""Exact strings of pi (``spec/pi-messages.md`` Appendix A)."""

from __future__ import annotations

from typing import Literal

COMPACTION_SUMMARY_PREFIX = (
    "The conversation history before this point was compacted into the following summary:\n\n<summary>\n"
)
"""P4.3."""
COMPACTION_SUMMARY_SUFFIX = "\n</summary>"
"""P4.3."""
BRANCH_SUMMARY_PREFIX = "The following is a summary of a branch that this conversation came back from:\n\n<summary>\n"
"""P4.3."""
BRANCH_SUMMARY_SUFFIX = "</summary>"
"""P4.3: no newline before it (asymmetric with the compaction suffix)."""

NO_RESULT_PROVIDED = "No result provided"
"""P5.7: the synthetic tool result transformMessages inserts for an unanswered call."""
SEE_ATTACHED_IMAGE = "(see attached image)"
"""P6.5: put first in a tool result that holds images and no text."""
REASONING_REDACTED = "[Reasoning redacted]"
"""P2.2: the thinking text pi stores for Anthropic ``redacted_thinking``."""

CURRENT_SESSION_VERSION = 3
"""P7.9."""
BRANCH_ROOT = "root"
"""P7.7: ``branch_summary.fromId`` when branching to before the first entry."""

FAILED_STOP_REASONS = frozenset({"error", "aborted"})
"""P3.7–P3.9: an assistant message that ended in one of these is a failed turn."""

TranscriptFormat = Literal["pi", "claude-code"]
"""The two session file formats agentbus reads and writes (``--format``, ``AGENTBUS_TRANSCRIPT_FORMAT``)."""
