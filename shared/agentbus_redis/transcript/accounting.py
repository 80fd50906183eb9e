"""Accounting for a transcript file's lines: why a file yields no conversation at all, and why lines
that were read did not become part of the resumed history (``agentbus replay``'s summary)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Collection

from agentbus_redis.errors import UnusableTranscript
from agentbus_redis.messages.kinds import ProgressMessage
from agentbus_redis.transcript.lines import is_message_line
from agentbus_redis.transcript.reader import TranscriptParse

SKIP_MALFORMED = "malformed"
SKIP_METADATA = "metadata (titles, summaries, snapshots)"
SKIP_PROGRESS = "progress (not part of a resumed history, R7.16)"
SKIP_OFF_CHAIN = "off the resumed chain (R7.18)"
SKIP_DROPPED_ON_RESUME = "dropped on resume (R7.20)"
SKIP_DUPLICATE = "duplicate uuid (R7.14)"


def diagnose_no_conversation(parse: TranscriptParse) -> UnusableTranscript:
    """Why a transcript resumes to nothing: it is empty, binary, not JSONL, or has metadata only."""
    if not parse.lines and not parse.errors:
        return UnusableTranscript("empty", "empty file: no JSONL line")
    if not parse.lines:
        first = parse.errors[0]
        if "\ufffd" in first.raw or "\x00" in first.raw:  # undecodable bytes (read as U+FFFD) or NUL: binary
            return UnusableTranscript("binary", "binary data, not UTF-8 text", line_number=first.line_number)
        return UnusableTranscript(
            "not_jsonl",
            f"not a JSONL transcript: no line is a JSON object with a `type` (first: {first.kind})",
            line_number=first.line_number,
        )
    return UnusableTranscript(
        "no_conversation",
        f"no user or assistant message to resume ({len(parse.lines)} line(s) of other kinds)",
    )


def skipped_lines(parse: TranscriptParse, *, chain_uuids: Collection[str], kept_uuids: Collection[str]) -> Counter[str]:
    """How many lines of ``parse`` did not become one of ``kept_uuids`` (the resumed history), by reason:
    malformed, metadata, legacy progress, a uuid already seen, off the resumed chain (``chain_uuids``,
    the walk from the leaf), or on the chain but dropped by the resume's clean-up."""
    skipped: Counter[str] = Counter()
    for error in parse.errors:
        skipped[f"{SKIP_MALFORMED} ({error.kind})"] += 1
    seen: set[str] = set()
    for numbered in parse.lines:
        line = numbered.line
        if not is_message_line(line):
            skipped[SKIP_METADATA] += 1
            continue
        if isinstance(line, ProgressMessage):
            skipped[SKIP_PROGRESS] += 1
            continue
        uuid: str = line.uuid  # type: ignore[union-attr]
        if uuid in seen:
            skipped[SKIP_DUPLICATE] += 1
        elif uuid not in chain_uuids:
            skipped[SKIP_OFF_CHAIN] += 1
        elif uuid not in kept_uuids:
            skipped[SKIP_DROPPED_ON_RESUME] += 1
        seen.add(uuid)
    return skipped
