"""Where ``agentbus up`` sends its workers' logs: every line to a file under the data directory, and to
the terminal either a short console view (warnings, errors, each worker's start) or every JSON line.

The workers always log JSON (their output is a pipe); the console view re-renders the lines it keeps
with structlog's ``ConsoleRenderer`` (coloured on a terminal), so the demo's readable lines stay readable.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any, Final, Literal, TextIO

import orjson
import structlog

LogFormat = Literal["auto", "console", "json"]

CONSOLE_EVENTS: Final = frozenset({"worker_started"})
"""INFO events the console view keeps; everything at WARNING and above is kept too."""

LOG_FILE_NAME: Final = "up.log"


def log_file_path(data_dir: Path) -> Path:
    return data_dir.resolve() / "logs" / LOG_FILE_NAME


def console_wanted(log_format: LogFormat, out: TextIO) -> bool:
    """``auto``: the console view on a terminal, JSON lines otherwise."""
    return log_format == "console" or (log_format == "auto" and out.isatty())


def shown_on_console(record: dict[str, Any]) -> bool:
    level = logging.getLevelNamesMapping().get(str(record.get("level", "")).upper(), logging.INFO)
    return level >= logging.WARNING or record.get("event") in CONSOLE_EVENTS


class WorkerLogs:
    """Writes each worker line to the log file (the previous run's kept as ``up.log.1``) and the terminal."""

    def __init__(self, path: Path, *, console: bool, out: TextIO) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        if path.exists():
            path.replace(path.with_name(path.name + ".1"))
        self.path = path
        self.console = console
        self.out = out
        self._file = path.open("ab", buffering=0)
        self._renderer = structlog.dev.ConsoleRenderer(colors=out.isatty(), pad_event_to=24)

    def line(self, worker: str, raw: bytes) -> None:
        self._file.write(raw + b"\n")
        if not self.console:
            self._print(raw.decode("utf-8", errors="replace"))
            return
        try:
            record = orjson.loads(raw)
        except orjson.JSONDecodeError:
            record = None
        if not isinstance(record, dict):
            self._print(f"{worker:<13} {raw.decode('utf-8', errors='replace')}")  # a crash's stderr, say
        elif shown_on_console(record):
            self._print(f"{worker:<13} {self._render(record)}")

    def _render(self, record: dict[str, Any]) -> str:
        record.pop("worker", None)  # the prefix says it
        timestamp = str(record.get("timestamp", ""))
        record["timestamp"] = timestamp[11:19] if len(timestamp) >= 19 else timestamp  # HH:MM:SS
        rendered: str = self._renderer(None, str(record.get("level", "info")), record)
        return rendered

    def _print(self, text: str) -> None:
        self.out.write(text + "\n")
        self.out.flush()

    def close(self) -> None:
        self._file.close()
