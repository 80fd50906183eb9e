"""Whether running a bash command line twice does no more than running it once (pure computation).

A tool job re-run after its worker died must not run a side-effecting call again (the tool worker claims
such calls, ``workers/tools/worker.py``); a call that only reads or prints may simply run again
and answer with its real output. :func:`runs_without_side_effects` is deliberately conservative: True
only when every simple command of the line runs a program of :data:`SIDE_EFFECT_FREE_PROGRAMS` (wrappers
such as ``timeout`` seen through), redirects no output to a file, and nothing in the line is opaque
(substitutions, subshells, control flow) or only known at run time.
"""

from __future__ import annotations

from typing import Final

from agentbus_redis.permissions.bash.parse import parse_command_line
from agentbus_redis.permissions.bash.wrappers import program_name

SIDE_EFFECT_FREE_PROGRAMS: Final = frozenset(
    {
        "echo",
        "printf",
        "sleep",
        "true",
        "false",
        "pwd",
        "ls",
        "cat",
        "head",
        "tail",
        "wc",
        "grep",
        "rg",
        "which",
        "whoami",
        "uname",
        "basename",
        "dirname",
        "stat",
    }
)
"""Programs whose every option only reads or prints (no ``-o FILE``, no ``-delete``, no ``-exec``)."""


def runs_without_side_effects(command: str) -> bool:
    """True when ``command`` only reads and prints (see the module docstring)."""
    line = parse_command_line(command)
    if line.opaque or line.unknowable or not line.commands:
        return False
    for simple in line.commands:
        if simple.output_targets or not simple.invocations:
            return False
        for invocation in simple.invocations:
            if invocation.unknowable or invocation.script is not None or invocation.reads_arguments:
                return False
            final = invocation.stages[-1]
            if not final or final[0].value is None or program_name(final[0].value) not in SIDE_EFFECT_FREE_PROGRAMS:
                return False
    return True
