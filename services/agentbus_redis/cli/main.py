"""The ``agentbus`` entry point: one root typer app whose commands are imported only when they run.

Start-up time is the point: importing every command's module (redis, pydantic models, the workers) cost
1.5–2 s before anything happened, ``--help`` included. The root lists its commands from
:data:`COMMANDS` (name, where the command lives, a one-line summary) and imports a command's module only
when that command is invoked or asked for its own help. Help is click's plain formatter
(``rich_markup_mode=None``): typer's rich help alone costs ~0.3 s of imports.
"""

from __future__ import annotations

import importlib
import os
from typing import Annotated, Any, NamedTuple

import typer
from typer.core import TyperCommand, TyperGroup

from agentbus_redis.cli.errors import DEBUG_ENV, run_with_error_boundary

LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")


class CommandSpec(NamedTuple):
    """Where a command lives: ``module:attribute`` is a typer function or a ``typer.Typer`` sub-app."""

    module: str
    attribute: str
    summary: str
    """The line ``agentbus --help`` shows (the command's own ``--help`` shows its docstring)."""


COMMANDS: dict[str, CommandSpec] = {
    "up": CommandSpec(
        "agentbus_redis.cli.local.up", "up_command", "Start every worker (and, without REDIS_URL, a private Redis)."
    ),
    "worker": CommandSpec("agentbus_redis.cli.bus", "worker_command", "Run one worker process."),
    "send": CommandSpec("agentbus_redis.cli.bus", "send_command", "Publish a user prompt to a session."),
    "tail": CommandSpec("agentbus_redis.cli.bus", "tail_command", "Print a session's canonical event log."),
    "replay": CommandSpec("agentbus_redis.cli.bus", "replay_command", "Push a recorded transcript through the bus."),
    "normalize": CommandSpec(
        "agentbus_redis.cli.normalize", "normalize_command", "A transcript → a Messages API request."
    ),
    "transcript": CommandSpec(
        "agentbus_redis.cli.transcript", "app", "Verify, repair, export and convert transcripts (Claude Code or pi)."
    ),
    "streams": CommandSpec(
        "agentbus_redis.cli.bus", "streams_app", "Create and inspect the pipeline's streams and groups."
    ),
    "dlq": CommandSpec("agentbus_redis.cli.bus", "dlq_app", "Inspect and replay dead letters."),
    "approvals": CommandSpec("agentbus_redis.cli.approvals", "app", "List and answer tool calls waiting for approval."),
    "agents": CommandSpec("agentbus_redis.cli.agents", "app", "Stop a running sub-agent."),
    "usage": CommandSpec("agentbus_redis.cli.usage", "usage_command", "Show a session's model usage and cost."),
    "tools": CommandSpec(
        "agentbus_redis.cli.tools", "app", "List the live tool workers and the tools they offer the model."
    ),
    "fake-model": CommandSpec(
        "agentbus_redis.cli.local.fake_model",
        "fake_model_command",
        "Serve a fake Anthropic Messages API (tests, the demo).",
    ),
    "chat": CommandSpec("agentbus_redis.cli.chat", "chat_command", "Talk to a session: stream the model's turn."),
}


def _plain_help(command: Any) -> None:
    """Click's plain help for ``command`` and its sub-commands (no rich import)."""
    command.rich_markup_mode = None
    for sub in getattr(command, "commands", {}).values():
        _plain_help(sub)


def load_command(name: str, spec: CommandSpec) -> Any:
    """Import ``spec``'s module and build its click command named ``name``."""
    target = getattr(importlib.import_module(spec.module), spec.attribute)
    command: Any
    if isinstance(target, typer.Typer):
        command = typer.main.get_group(target)
    else:
        single = typer.Typer(add_completion=False)
        single.command(name)(target)
        command = typer.main.get_command(single)
    command.name = name
    _plain_help(command)
    return command


class LazyGroup(TyperGroup):
    """The root group: lists :data:`COMMANDS` without importing them; loads one when it is resolved."""

    _listing = False

    def list_commands(self, ctx: Any) -> list[str]:
        return [*COMMANDS, *(name for name in super().list_commands(ctx) if name not in COMMANDS)]

    def get_command(self, ctx: Any, cmd_name: str) -> Any:
        loaded = super().get_command(ctx, cmd_name)
        spec = COMMANDS.get(cmd_name)
        if loaded is not None or spec is None:
            return loaded
        if self._listing:  # the root's help needs a name and a line, not the command
            return TyperCommand(name=cmd_name, short_help=spec.summary, help=spec.summary)
        command = load_command(cmd_name, spec)
        self.add_command(command, cmd_name)
        return command

    def format_help(self, ctx: Any, formatter: Any) -> None:
        self._listing = True
        try:
            super().format_help(ctx, formatter)
        finally:
            self._listing = False


app = typer.Typer(
    name="agentbus",
    cls=LazyGroup,
    no_args_is_help=True,
    add_completion=False,
    rich_markup_mode=None,
    pretty_exceptions_enable=False,  # the error boundary in main() decides what is printed
    context_settings={"help_option_names": ["-h", "--help"]},
)


def _print_version(value: bool) -> None:
    if not value:
        return
    import platform

    from agentbus_redis.config.build_info import build_commit, package_version

    typer.echo(
        f"agentbus {package_version()} (commit {build_commit()}) "
        f"{platform.python_implementation()} {platform.python_version()} on {platform.system()}"
    )
    raise typer.Exit


def _check_log_level(value: str | None) -> str | None:
    if value is not None and value.upper() not in LOG_LEVELS:
        raise typer.BadParameter(f"{value!r} is not one of {', '.join(LOG_LEVELS)}")
    return value


@app.callback()
def root(
    redis_url: Annotated[
        str | None,
        typer.Option(
            "--redis-url",
            metavar="URL",
            envvar=["REDIS_URL", "AGENTBUS_REDIS_URL"],
            show_envvar=True,
            help="Redis of the bus [default: from .env, else redis://127.0.0.1:6379/0].",
        ),
    ] = None,
    log_level: Annotated[
        str | None,
        typer.Option(
            "--log-level",
            metavar="LEVEL",
            envvar=["LOG_LEVEL", "AGENTBUS_LOG_LEVEL"],
            show_envvar=True,
            callback=_check_log_level,
            help=f"Log level of the workers started from here ({', '.join(LOG_LEVELS)}) [default: INFO].",
        ),
    ] = None,
    debug: Annotated[
        bool,
        typer.Option("--debug", envvar=DEBUG_ENV, show_envvar=True, help="Show tracebacks, not one-line errors."),
    ] = False,
    version: Annotated[
        bool,
        typer.Option("--version", callback=_print_version, is_eager=True, help="Print version and git commit."),
    ] = False,
) -> None:
    """agentbus: Claude Code's message system as workers over Redis Streams.

    Settings come from the environment and from a .env file in the working directory (see README).
    """
    # Exported, not passed down: Settings() in every command and the workers `up` starts read them.
    if redis_url:
        os.environ["REDIS_URL"] = redis_url
    if log_level:
        os.environ["LOG_LEVEL"] = log_level.upper()
    if debug:
        os.environ[DEBUG_ENV] = "1"


def main() -> None:
    run_with_error_boundary(lambda: app(prog_name="agentbus"))


if __name__ == "__main__":
    main()
