"""The process-wide switch of every ``agentbus_*`` metric (``AGENTBUS_METRICS``), in a module of its own so
that every family module reads it without importing the module that lists them all."""

from __future__ import annotations

_recording = True


def set_recording(enabled: bool) -> None:
    """Turn the ``agentbus_*`` recording on or off for this process (``AGENTBUS_METRICS``). Off, every
    ``record_*``/``observe_*`` call returns at once and handlers are not timed: what the pipeline benchmark
    compares against to price the metrics (issue 5: at most 5% of throughput)."""
    global _recording  # one process-wide switch, set once at startup
    _recording = enabled


def recording() -> bool:
    return _recording
