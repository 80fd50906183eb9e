"""``format_timestamp``: message timestamps as JavaScript's ``Date.prototype.toISOString`` writes them."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone

from agentbus_redis.clock import format_timestamp


def test_a_timestamp_is_utc_with_milliseconds_truncated_and_a_z() -> None:
    moment = datetime(2026, 11, 28, 9, 43, 2, 123_999, tzinfo=UTC)
    assert format_timestamp(moment) == "2026-11-28T09:43:02.123Z"
    assert format_timestamp(moment.replace(microsecond=0)) == "2026-11-28T09:43:02.000Z"


def test_a_moment_in_another_zone_is_written_in_utc() -> None:
    east = timezone(timedelta(hours=5, minutes=30))
    assert format_timestamp(datetime(2026, 1, 1, 3, 0, 0, 500, tzinfo=east)) == "2025-12-31T21:30:00.000Z"


def test_a_year_before_1000_has_four_digits_as_in_javascript() -> None:
    # const d = new Date(0); d.setUTCFullYear(5); d.toISOString() → "0005-01-01T00:00:00.000Z"
    assert format_timestamp(datetime(5, 1, 1, tzinfo=UTC)) == "0005-01-01T00:00:00.000Z"
