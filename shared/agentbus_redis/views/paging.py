"""Cursor paging over several sorted sets at once (a shard's index each), newest first.

Order: score descending, then member descending (what ``ZRANGE … BYSCORE REV`` returns). The cursor is the
last row shown, so a page costs the same however deep it is and whatever was added since (no offsets).
"""

from __future__ import annotations

import base64
from dataclasses import dataclass

from agentbus_redis.errors import AgentbusError


class BadCursor(AgentbusError, ValueError):
    """A cursor that this console did not hand out."""

    def __init__(self, cursor: str) -> None:
        super().__init__(f"not a sessions cursor: {cursor[:40]!r}")


@dataclass(frozen=True, slots=True, order=True)
class IndexRow:
    """One member of an index and its score (for the sessions index: its last activity, epoch ms)."""

    score: int
    member: str


def encode_cursor(row: IndexRow) -> str:
    return base64.urlsafe_b64encode(f"{row.score}:{row.member}".encode()).decode().rstrip("=")


def decode_cursor(cursor: str) -> IndexRow:
    """The row a cursor names; :class:`BadCursor` for anything else."""
    try:
        text = base64.urlsafe_b64decode(cursor + "=" * (-len(cursor) % 4)).decode()
        score, member = text.split(":", 1)
        return IndexRow(int(score), member)
    except (ValueError, UnicodeDecodeError) as error:
        raise BadCursor(cursor) from error


def comes_after(row: IndexRow, cursor: IndexRow | None) -> bool:
    """Whether ``row`` is listed after ``cursor`` in newest-first order."""
    return cursor is None or row.score < cursor.score or (row.score == cursor.score and row.member < cursor.member)


def merge_page(
    candidates: list[list[IndexRow]], *, after: IndexRow | None, limit: int
) -> tuple[list[IndexRow], str | None]:
    """The next ``limit`` rows after ``after`` across every index's candidates, and the cursor of the page
    after it (None: this is the last). Each candidate list holds the first rows of one index at or after the
    cursor, ``limit + 1`` of them past it when the index has that many (what makes "is there more" exact)."""
    rows = sorted(
        {row for rows in candidates for row in rows if comes_after(row, after)},
        key=lambda row: (row.score, row.member),
        reverse=True,
    )
    page = rows[:limit]
    more = len(rows) > limit
    return page, encode_cursor(page[-1]) if more and page else None


__all__ = ["BadCursor", "IndexRow", "comes_after", "decode_cursor", "encode_cursor", "merge_page"]
