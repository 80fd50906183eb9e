"""What an interrupt stops (R8.9, A8.3/A8.4) and the mark that carries its reason (bus/interrupts.py)."""

from __future__ import annotations

import pytest

from agentbus_redis.bus.interrupts import (
    InterruptMark,
    format_interrupt_mark,
    interrupt_stops,
    parse_interrupt_mark,
    stronger_reason,
)
from agentbus_redis.bus.ledger import LedgerOutput


@pytest.mark.parametrize(
    ("reason", "behavior", "stops"),
    [
        ("user_cancel", "block", True),  # esc, a stopped sub-agent: Bash is killed too
        ("user_cancel", "cancel", True),
        ("interrupt", "block", False),  # a message typed while tools run: Bash runs on
        ("interrupt", "cancel", True),
    ],
)
def test_r8_9_what_an_interrupt_stops_of_the_running_calls(reason: str, behavior: str, stops: bool) -> None:
    assert interrupt_stops(reason, behavior) is stops  # type: ignore[arg-type]


@pytest.mark.parametrize("reason", ["user_cancel", "interrupt"])
def test_a_mark_reads_back_as_written(reason: str) -> None:
    text = format_interrupt_mark(1_764_000_000_123, reason)  # type: ignore[arg-type]
    assert text == f"1764000000123 {reason}"
    assert parse_interrupt_mark(text.encode()) == InterruptMark(1_764_000_000_123, reason)  # type: ignore[arg-type]


def test_a_mark_without_a_reason_reads_as_interrupt() -> None:
    """A bare time, as ingestion wrote before the reason was kept (a key set during a rolling upgrade): the
    running ``block`` calls run on, as they then did."""
    assert parse_interrupt_mark(b"1764000000123") == InterruptMark(1_764_000_000_123, "interrupt")
    assert parse_interrupt_mark("1764000000123 something-newer") == InterruptMark(1_764_000_000_123, "interrupt")


def test_the_stronger_reason_is_the_one_that_stops_more() -> None:
    assert stronger_reason("interrupt", "interrupt") == "interrupt"
    assert stronger_reason("interrupt", "user_cancel") == "user_cancel"
    assert stronger_reason("user_cancel", "interrupt") == "user_cancel"


def test_outputs_joined_keep_the_stronger_reason_of_their_interrupts() -> None:
    typed = LedgerOutput(interrupt_tools=True, interrupt_reason="interrupt")
    typed.extend(LedgerOutput(interrupt_model=True, interrupt_reason="user_cancel"))
    assert (typed.interrupt_tools, typed.interrupt_model, typed.interrupt_reason) == (True, True, "user_cancel")
    quiet = LedgerOutput()  # no interrupt: its default reason does not count
    quiet.extend(LedgerOutput(interrupt_tools=True, interrupt_reason="interrupt"))
    assert quiet.interrupt_reason == "interrupt"
    quiet.extend(LedgerOutput())
    assert quiet.interrupt_reason == "interrupt"
