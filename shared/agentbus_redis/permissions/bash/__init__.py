"""Bash command lines read for permission checks: the tree-sitter parse, wrappers, commands, side effects."""

from __future__ import annotations

from typing import TYPE_CHECKING

from agentbus_redis.lazy_facade import lazy_facade

if TYPE_CHECKING:
    from agentbus_redis.permissions.bash.commands import (
        CommandLine,
        SimpleCommand,
        Words,
        strip_safe_env_assignments,
        strip_wrappers,
    )
    from agentbus_redis.permissions.bash.effects import SIDE_EFFECT_FREE_PROGRAMS, runs_without_side_effects
    from agentbus_redis.permissions.bash.parse import MAX_SCRIPT_DEPTH, parse_command_line
    from agentbus_redis.permissions.bash.wrappers import (
        Arg,
        Args,
        Invocation,
        program_name,
        resolve_invocations,
        split_assignment,
    )

__all__ = [
    "MAX_SCRIPT_DEPTH",
    "SIDE_EFFECT_FREE_PROGRAMS",
    "Arg",
    "Args",
    "CommandLine",
    "Invocation",
    "SimpleCommand",
    "Words",
    "parse_command_line",
    "program_name",
    "resolve_invocations",
    "runs_without_side_effects",
    "split_assignment",
    "strip_safe_env_assignments",
    "strip_wrappers",
]

_MODULE_OF = {
    "Arg": "wrappers",
    "Args": "wrappers",
    "CommandLine": "commands",
    "Invocation": "wrappers",
    "MAX_SCRIPT_DEPTH": "parse",
    "SIDE_EFFECT_FREE_PROGRAMS": "effects",
    "SimpleCommand": "commands",
    "Words": "commands",
    "parse_command_line": "parse",
    "program_name": "wrappers",
    "resolve_invocations": "wrappers",
    "runs_without_side_effects": "effects",
    "split_assignment": "wrappers",
    "strip_safe_env_assignments": "commands",
    "strip_wrappers": "commands",
}


__getattr__, __dir__ = lazy_facade(globals(), _MODULE_OF)
