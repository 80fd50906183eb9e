"""Progress of a long command on stderr: a ``rich`` progress bar on a terminal, plain lines otherwise."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Protocol

import typer

PLAIN_LINE_MIN_TOTAL = 2
"""Plain mode prints a ``publish`` phase only when it has several steps (one line per chunk)."""


class PhaseProgress(Protocol):
    def __call__(self, phase: str, done: int, total: int) -> None: ...


@contextmanager
def phase_progress(labels: dict[str, str]) -> Iterator[PhaseProgress]:
    """A ``(phase, done, total)`` callback; ``labels`` maps a phase's kind (before ``:``) to a format string
    of its ``{detail}`` (after ``:``). On a terminal each kind is a bar, elsewhere a line per step on stderr
    (a ``publish`` phase only when it has several steps)."""

    def label_of(phase: str) -> str:
        kind, _, detail = phase.partition(":")
        return labels.get(kind, kind).format(detail=detail)

    if not sys.stderr.isatty():

        def plain(phase: str, done: int, total: int) -> None:
            if total >= PLAIN_LINE_MIN_TOTAL or not phase.startswith("publish"):
                typer.echo(f"agentbus: {label_of(phase)}: {done}/{total}", err=True)

        yield plain
        return

    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn())
    with Progress(*columns, console=Console(stderr=True), transient=False) as bar:
        tasks: dict[str, object] = {}

        def rich_step(phase: str, done: int, total: int) -> None:
            kind = phase.partition(":")[0]
            description = label_of(phase)
            if kind not in tasks:
                tasks[kind] = bar.add_task(description, total=total)
            task = tasks[kind]
            bar.update(task, completed=done, total=total, description=description)  # type: ignore[arg-type]

        yield rich_step
