"""Reading a whole JSONL transcript (R7.14) without ever losing a line silently.

Claude Code splits on ``\\n``, trims, skips blank and malformed lines and strips a UTF-8 BOM. agentbus
does the same, except that every malformed line is kept as a :class:`TranscriptLineError` value
(with its 1-based line number) next to the good lines, so callers can report or repair it.

A line with invalid UTF-8 bytes is decoded with U+FFFD and parsed like any other (Node's ``readFile``
with ``utf8`` does the same), so one bad byte does not break the chain; it is reported as a
:class:`TranscriptLineWarning`, as is a line whose JSON escapes decode to lone surrogates.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Literal, NamedTuple

from agentbus_redis.errors import TranscriptLineError
from agentbus_redis.transcript.lines import TranscriptLine, parse_line
from agentbus_redis.transcript.unicode_text import decode_utf8_replacing, json_line_lone_surrogates

_BOM = "\ufeff"
_BOM_BYTES = b"\xef\xbb\xbf"


class NumberedLine(NamedTuple):
    """One good line: its 1-based physical line number, the parsed line and its raw text."""

    line_number: int
    line: TranscriptLine
    raw: str


LineWarningKind = Literal["invalid_utf8", "lone_surrogate"]


@dataclass(frozen=True)
class TranscriptLineWarning:
    """A line that was read, but not exactly as written (issue 15).

    ``invalid_utf8``: ``count`` invalid byte sequences were decoded as U+FFFD (the line is kept, its
    text differs from the file's bytes there). ``lone_surrogate``: ``count`` JSON escapes decode to
    unpaired UTF-16 halves; the line model keeps them, and writers replace (API output) or re-escape
    (JSONL) them, since UTF-8 cannot encode them."""

    line_number: int
    kind: LineWarningKind
    count: int

    @property
    def detail(self) -> str:
        if self.kind == "invalid_utf8":
            return f"{self.count} invalid UTF-8 byte sequence(s) read as U+FFFD"
        return f"{self.count} lone surrogate(s) (unpaired \\ud800-\\udfff escapes); written out as U+FFFD"

    def __str__(self) -> str:
        return f"line {self.line_number}: {self.kind}: {self.detail}"


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
    warnings: tuple[TranscriptLineWarning, ...] = ()
    """Lines kept but not read exactly as written (invalid bytes, lone surrogates), in file order."""

    @property
    def entries(self) -> list[TranscriptLine]:
        """The parsed lines without their numbers."""
        return [numbered.line for numbered in self.lines]


def _split_bytes(data: bytes) -> Iterator[tuple[str, bool, int]]:
    """Physical lines of ``data`` as ``(text, newline-terminated, invalid byte sequences replaced)``."""
    if data.startswith(_BOM_BYTES):
        data = data[len(_BOM_BYTES) :]
    pieces = data.split(b"\n")
    for index, piece in enumerate(pieces):
        terminated = index < len(pieces) - 1
        if not terminated and not piece:
            return
        text, replaced = decode_utf8_replacing(piece)
        yield text, terminated, replaced


def _split_text(chunks: Iterable[str]) -> Iterator[tuple[str, bool, int]]:
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
            yield text, True, 0
    if pending:
        yield pending, False, 0


def read_transcript(data: str | bytes | Iterable[str]) -> TranscriptParse:
    """R7.14: parse a whole transcript. Blank lines are skipped (they still count for numbering);
    each malformed line becomes a :class:`TranscriptLineError`, each line not read exactly as written a
    :class:`TranscriptLineWarning`; nothing raises."""
    if isinstance(data, bytes):
        physical = _split_bytes(data)
    elif isinstance(data, str):
        physical = _split_text([data])
    else:
        physical = _split_text(data)
    good: list[NumberedLine] = []
    errors: list[TranscriptLineError] = []
    warnings: list[TranscriptLineWarning] = []
    line_number = 0
    torn_tail = False
    for text, terminated, replaced in physical:
        line_number += 1
        if not text.strip():
            continue
        try:
            good.append(NumberedLine(line_number, parse_line(text, line_number), text))
        except TranscriptLineError as error:
            if not terminated:
                error.torn = True
                torn_tail = True
            errors.append(error)
            continue
        if replaced:
            warnings.append(TranscriptLineWarning(line_number, "invalid_utf8", replaced))
        if surrogates := json_line_lone_surrogates(text):
            warnings.append(TranscriptLineWarning(line_number, "lone_surrogate", surrogates))
    return TranscriptParse(
        lines=tuple(good), errors=tuple(errors), torn_tail=torn_tail, line_count=line_number, warnings=tuple(warnings)
    )
