"""Reading a whole JSONL transcript (R7.14) without ever losing a line silently.

Claude Code splits on ``\\n``, trims, skips blank and malformed lines and strips a UTF-8 BOM. agentbus
does the same, except that every malformed line is kept as a :class:`TranscriptLineError` value
(with its 1-based line number) next to the good lines, so callers can report or repair it.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import NamedTuple

from shared.errors import TranscriptLineError
from shared.transcript.lines import TranscriptLine, parse_line

_BOM = "\ufeff"
_BOM_BYTES = b"\xef\xbb\xbf"


class NumberedLine(NamedTuple):
    """One good line: its 1-based physical line number, the parsed line and its raw text."""

    line_number: int
    line: TranscriptLine
    raw: str


@dataclass(frozen=True)
class TranscriptParse:
    """Everything read from one transcript: good lines in file order, malformed lines as errors.

    ``torn_tail`` is true when the last non-blank line has no trailing newline *and* does not parse
    (a write cut short by a crash); that line is also in ``errors`` with ``torn=True``.
    """

    lines: tuple[NumberedLine, ...]
    errors: tuple[TranscriptLineError, ...]
    torn_tail: bool = False
    line_count: int = 0
    """Physical lines seen (blank ones included), i.e. the highest line number."""

    @property
    def entries(self) -> list[TranscriptLine]:
        """The parsed lines without their numbers."""
        return [numbered.line for numbered in self.lines]


def _split_bytes(data: bytes) -> Iterator[tuple[str | None, str, bool]]:
    """Physical lines of ``data`` as ``(text or None when undecodable, raw text, newline-terminated)``."""
    if data.startswith(_BOM_BYTES):
        data = data[len(_BOM_BYTES) :]
    pieces = data.split(b"\n")
    for index, piece in enumerate(pieces):
        terminated = index < len(pieces) - 1
        if not terminated and not piece:
            return
        try:
            text = piece.decode("utf-8")
        except UnicodeDecodeError:
            yield None, piece.decode("utf-8", errors="replace"), terminated
        else:
            yield text, text, terminated


def _split_text(chunks: Iterable[str]) -> Iterator[tuple[str | None, str, bool]]:
    """Physical lines of text arriving in arbitrary chunks (whole lines, a file object, one string)."""
    pending = ""
    first = True
    for chunk in chunks:
        if first and chunk:
            chunk = chunk.removeprefix(_BOM)
            first = False
        pending += chunk
        if "\n" not in pending:
            continue
        *complete, pending = pending.split("\n")
        for text in complete:
            yield text, text, True
    if pending:
        yield pending, pending, False


def read_transcript(data: str | bytes | Iterable[str]) -> TranscriptParse:
    """R7.14: parse a whole transcript. Blank lines are skipped (they still count for numbering);
    each malformed line becomes a :class:`TranscriptLineError`; nothing raises."""
    if isinstance(data, bytes):
        physical = _split_bytes(data)
    elif isinstance(data, str):
        physical = _split_text([data])
    else:
        physical = _split_text(data)
    good: list[NumberedLine] = []
    errors: list[TranscriptLineError] = []
    line_number = 0
    torn_tail = False
    for text, raw, terminated in physical:
        line_number += 1
        if text is None:
            errors.append(
                TranscriptLineError(line_number, "bad_utf8", raw, detail="not valid UTF-8", torn=not terminated)
            )
            torn_tail = not terminated
            continue
        if not text.strip():
            continue
        try:
            good.append(NumberedLine(line_number, parse_line(text, line_number), text))
        except TranscriptLineError as error:
            if not terminated:
                error.torn = True
                torn_tail = True
            errors.append(error)
    return TranscriptParse(lines=tuple(good), errors=tuple(errors), torn_tail=torn_tail, line_count=line_number)
