"""``NormalizationReport.counts`` and the builder's prefix check, which the worker and the builder use per request."""

from __future__ import annotations

from collections import Counter

from agentbus_redis.normalize.incremental import _starts_with
from agentbus_redis.normalize.report import NormalizationReport, Repair, RepairKind


def _repair(kind: RepairKind) -> Repair:
    return Repair(kind=kind, rule="R0")


def test_counts_of_no_repairs_is_empty() -> None:
    assert NormalizationReport().counts == {}


def test_counts_are_what_a_counter_gives_in_the_same_order() -> None:
    kinds = [
        RepairKind.TRAILING_WHITESPACE_TRIMMED,
        RepairKind.LEADING_USER_INSERTED,
        RepairKind.TRAILING_WHITESPACE_TRIMMED,
    ]
    counts = NormalizationReport(repairs=tuple(map(_repair, kinds))).counts
    expected = dict(Counter(kind.value for kind in kinds))
    assert counts == expected
    assert list(counts) == list(expected)  # the request key's JSON keeps this order


def test_a_constructed_report_equals_a_validated_one() -> None:
    repairs = (_repair(RepairKind.LEADING_USER_INSERTED),)
    constructed = NormalizationReport.model_construct(repairs=repairs)
    assert constructed == NormalizationReport(repairs=repairs)
    assert constructed.model_dump_json() == NormalizationReport(repairs=repairs).model_dump_json()


def test_starts_with_compares_identity_not_equality() -> None:
    first, second = {"role": "user", "content": "a"}, {"role": "assistant", "content": "b"}
    params = [first, second]
    assert _starts_with([first, second, {"role": "user", "content": "c"}], params, 2)
    assert not _starts_with([dict(first), second], params, 2)  # equal, not the same object
    assert not _starts_with([first], params, 2)  # shorter than the prefix
    assert _starts_with([], [], 0)
