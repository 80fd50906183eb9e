"""The ``agentbus`` entry point: one root typer app; each area adds its sub-app or command here."""

from __future__ import annotations

import typer

from services.cli import transcript
from services.cli.bus import (
    dlq_app,
    replay_command,
    send_command,
    streams_app,
    tail_command,
    worker_command,
)
from services.cli.normalize import normalize_command
from services.cli.up import up_command

app = typer.Typer(name="agentbus", help="agentbus: Claude Code's message system as workers.", no_args_is_help=True)
app.add_typer(transcript.app, name="transcript")
app.command("normalize")(normalize_command)
app.command("up")(up_command)
app.command("worker")(worker_command)
app.command("send")(send_command)
app.command("tail")(tail_command)
app.command("replay")(replay_command)
app.add_typer(streams_app, name="streams")
app.add_typer(dlq_app, name="dlq")


def main() -> None:
    app()


if __name__ == "__main__":
    main()
