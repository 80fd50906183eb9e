"""Resource limits of one sandboxed command, applied inside the sandbox with the shell's ``ulimit``.

They are set inside (after the sandbox's own user namespace exists) so the process count is the
command's own: the kernel counts processes per user and user namespace, so one command's fork bomb
does not use up another session's processes.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class SandboxLimits:
    """Per-command limits (``None``: not limited)."""

    cpu_s: int | None = 300
    """CPU seconds (RLIMIT_CPU): a busy loop is killed with SIGXCPU."""
    memory_mb: int | None = 2048
    """Address space (RLIMIT_AS) of each process."""
    processes: int | None = 256
    """Processes and threads of the command (RLIMIT_NPROC)."""
    open_files: int | None = 1024
    """Open file descriptors per process (RLIMIT_NOFILE)."""
    file_size_mb: int | None = 1024
    """Largest file a process may write (RLIMIT_FSIZE): past it the write fails with SIGXFSZ / EFBIG."""

    def ulimit_arguments(self) -> list[str]:
        """The ``ulimit`` options setting both soft and hard limits (bash units: KiB for -v and -f)."""
        options: list[str] = []
        for flag, value in (
            ("-t", self.cpu_s),
            ("-v", None if self.memory_mb is None else self.memory_mb * 1024),
            ("-u", self.processes),
            ("-n", self.open_files),
            ("-f", None if self.file_size_mb is None else self.file_size_mb * 1024),
        ):
            if value is not None:
                options += [flag, str(value)]
        return options


LIMITS_FAILED_EXIT = 125
"""Exit status of a command whose limits could not be set (it does not run)."""
SETUP_FAILED_EXIT = 126
"""Exit status of a command whose setup (the network bridge) failed (it does not run)."""


def limited_shell_argv(
    shell: str, command: str, limits: SandboxLimits, *, setup: str | None = None, setup_args: Sequence[str] = ()
) -> list[str]:
    """``shell -c 'ulimit …; [SETUP || exit 126;] exec shell -c "$1"' shell COMMAND [SETUP_ARGS…]``: the limits
    are set, then ``setup`` runs under them (``$2``… are ``setup_args``), then the command runs in a fresh
    shell that inherits them (it cannot raise a hard limit back)."""
    steps = []
    if limits.ulimit_arguments():
        steps.append(" ".join(["ulimit", "-S", "-H", *limits.ulimit_arguments()]) + f" || exit {LIMITS_FAILED_EXIT}")
    if setup is not None:
        steps.append(f"{{ {setup}; }} || exit {SETUP_FAILED_EXIT}")
    prelude = "; ".join([*steps, 'exec "$0" -c "$1"'])
    return [shell, "-c", prelude, shell, command, *setup_args]


CLOSE_DESCRIPTORS = (
    'for fd in /proc/self/fd/*; do fd=${fd##*/}; if [ "$fd" -gt 2 ]; then exec {fd}>&-; fi; done; exec "$@"'
)
"""(No redirection on the loop: bash would keep a copy of stderr on a high descriptor and close it too.)"""
"""Closes every descriptor above stderr, then runs its arguments: an event loop (uvloop) may let descriptors
the worker holds — its Redis connections among them — leak into a child whatever ``close_fds`` says."""


def closing_descriptors_argv(shell: str, argv: list[str]) -> list[str]:
    """``argv`` run with nothing open but stdin, stdout and stderr (``shell`` must be bash-compatible)."""
    return [shell, "-c", CLOSE_DESCRIPTORS, shell, *argv]


DIE_WITH_WORKER = 'exec 3<&0 </dev/null; { read -r -u 3 _; kill -KILL 0; } >/dev/null 2>&1 & exec 3<&-; exec "$@"'
"""Runs its arguments with stdin on ``/dev/null`` beside a watchdog that reads the stdin it was given: a pipe whose
write end only the worker holds. Nothing is ever written to it, so the read ends when the worker is gone, SIGKILL
included, and the watchdog kills its whole process group: the command and whatever it started."""


def dying_with_worker_argv(shell: str, argv: list[str]) -> list[str]:
    """``argv`` in a process group SIGKILLed when the worker dies, given that the worker starts it in a session of
    its own with stdin a pipe it keeps open and never writes (``shell`` must be bash-compatible). A sandboxed
    command has this from bubblewrap (``--die-with-parent``, its PID namespace); an unsandboxed one needs it:
    ``start_new_session`` alone leaves a killed worker's commands running."""
    return [shell, "-c", DIE_WITH_WORKER, shell, *argv]
