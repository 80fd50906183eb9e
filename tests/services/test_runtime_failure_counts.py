"""failure_counts.py's verdicts (issue 15): what an ordered lane's entry is dead-lettered for, and which
pending entries it re-reads alone."""

from __future__ import annotations

from agentbus_redis.runtime.failure_counts import error_text, exhausted, is_suspect
from agentbus_redis.streams.deadletter import REASON_HANDLER_FAILED, REASON_MAX_DELIVERIES


def test_an_entry_that_failed_max_deliveries_times_is_dead_lettered_for_its_handler_failures() -> None:
    assert exhausted(4, 3, 4, ordered=True) is None
    assert exhausted(5, 4, 4, ordered=True) == (REASON_HANDLER_FAILED, "failed 4 times, delivered 5 times")


def test_deliveries_without_failures_are_a_crash_loop_only_past_the_ceiling() -> None:
    assert exhausted(16, 0, 4, ordered=True) is None
    reason, detail = exhausted(17, 0, 4, ordered=True) or ("", "")
    assert reason == REASON_MAX_DELIVERIES
    assert detail.endswith("a crash loop")


def test_the_unordered_pool_counts_deliveries() -> None:
    assert exhausted(5, 0, 5, ordered=False) is None
    assert exhausted(6, 0, 5, ordered=False) == (REASON_MAX_DELIVERIES, "delivered 6 times")


def test_an_entry_in_hand_twice_without_an_outcome_is_a_suspect() -> None:
    assert not is_suspect(1, 0)  # in hand once when its process stopped: any entry of that batch
    assert not is_suspect(3, 2)  # every delivery but the one in hand ended in a recorded failure
    assert is_suspect(2, 0)
    assert is_suspect(5, 3)


def test_the_error_text_names_the_exception_type_and_is_bounded() -> None:
    assert error_text(IsADirectoryError(21, "Is a directory")) == "IsADirectoryError: [Errno 21] Is a directory"
    assert len(error_text(ValueError("x" * 2000))) == 500
