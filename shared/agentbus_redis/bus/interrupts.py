"""What an interrupt stops among a job's running tool calls (R8.9, A8.3/A8.4), and the mark that carries its
reason to the workers (the value of the session's interrupt key).

R8.9: a user interrupt answers every call not yet started with the rejection; of the running calls, the abort
reason decides. ``interrupt`` (the user typed a new message while tools run) cancels only the tools whose
``interruptBehavior()`` is ``cancel``; ``block`` tools (Bash among them) keep running. ``user_cancel`` (esc, the
abort controller itself) stops every running call. The bus sends ``user_cancel`` for esc, for a stopped
sub-agent (A8.3: its running commands are killed, A8.4) and for a deny that interrupts (H6.2); a stuck turn's
end stops the calls it answered the same way.
"""

from __future__ import annotations

from typing import Literal, NamedTuple

from agentbus_redis.tools.tool import InterruptBehavior

InterruptReason = Literal["user_cancel", "interrupt"]
"""Why a session was interrupted (the ``reason`` of an ``interrupt`` ingress event)."""


class InterruptMark(NamedTuple):
    """When (the ingestion clock, ms) and why a session was last interrupted."""

    at_ms: int
    reason: InterruptReason


def format_interrupt_mark(at_ms: int, reason: InterruptReason) -> str:
    """``"<at_ms> <reason>"``, the value ingestion sets on the session's interrupt key."""
    return f"{at_ms} {reason}"


def parse_interrupt_mark(raw: bytes | str) -> InterruptMark:
    """The mark of :func:`format_interrupt_mark`. A bare time is a mark written before the reason was kept: it
    reads as ``interrupt``, what every interrupt then meant to a running tool (its ``block`` calls ran on)."""
    text = raw.decode() if isinstance(raw, bytes) else raw
    at_ms, _, reason = text.partition(" ")
    return InterruptMark(int(at_ms), "user_cancel" if reason == "user_cancel" else "interrupt")


def stronger_reason(first: InterruptReason, second: InterruptReason) -> InterruptReason:
    """Of two interrupts of the same run, the one that stops more: ``user_cancel`` once either is."""
    return "user_cancel" if "user_cancel" in (first, second) else "interrupt"


def interrupt_stops(reason: InterruptReason, behavior: InterruptBehavior) -> bool:
    """R8.9: whether an interrupt for ``reason`` stops a running call of a tool with ``behavior``."""
    return reason == "user_cancel" or behavior == "cancel"


__all__ = [
    "InterruptMark",
    "InterruptReason",
    "format_interrupt_mark",
    "interrupt_stops",
    "parse_interrupt_mark",
    "stronger_reason",
]
