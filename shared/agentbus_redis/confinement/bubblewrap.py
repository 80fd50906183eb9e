"""The bubblewrap command line of one sandboxed command.

What the command sees: the system directories read-only (and the extra read-only paths a program needs, such
as a sandboxed MCP server's virtualenv), its session's workspace (at the same path the
file tools report) writable, a private ``/tmp`` of bounded size, a ``/proc`` of its own PID namespace
(no other process's ``environ`` or ``cmdline``), a minimal ``/dev``, its own IPC, UTS and network
namespaces (only a loopback of its own: no network), no capabilities, and a new session (no
terminal injection). With a network bridge (a deployment that allow-lists domains, ``network.py``) the
worker's proxy socket is mounted read-only in it and a small bridge, started under the command's limits
before the command, listens on the namespace's own loopback and forwards to that socket; the command's
environment points its HTTP clients there. Everything else — other sessions' workspaces, the transcripts,
the worker's files and secrets — is simply not mounted. The sandbox dies with the worker
(``--die-with-parent``) and every process in it dies when the command's shell exits (the PID namespace
ends with its init).

Two ways to get there. A worker that is not root runs bubblewrap unprivileged: it makes a user namespace
whose only user is the worker's. A root worker runs bubblewrap as root (so it can mount workspaces under
root-only directories), and the command drops to an unprivileged user (``setpriv``) and enters a user
namespace of its own (``unshare --user``) before its limits are set: the kernel never enforces a
process limit on root, and counts processes per user and user namespace.
"""

from __future__ import annotations

import shlex
from collections.abc import Sequence
from dataclasses import dataclass, field

from agentbus_redis.confinement.limits import SandboxLimits, limited_shell_argv
from agentbus_redis.confinement.network import BRIDGE_PORT

DEFAULT_SYSTEM_PATHS: tuple[str, ...] = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/etc", "/opt")
"""Mounted read-only when they exist (a symlink such as ``/bin -> usr/bin`` is mounted as what it points to)."""


@dataclass(frozen=True, slots=True)
class DropPrivileges:
    """How a root worker's command becomes an unprivileged user in a user namespace of its own."""

    uid: int
    gid: int
    setpriv: str = "/usr/bin/setpriv"
    unshare: str = "/usr/bin/unshare"

    def argv(self) -> list[str]:
        return [
            self.setpriv,
            f"--reuid={self.uid}",
            f"--regid={self.gid}",
            "--clear-groups",
            "--no-new-privs",
            "--bounding-set=-all",
            "--inh-caps=-all",
            "--",
            self.unshare,
            "--user",
            "--map-current-user",
            "--",
        ]


BRIDGE_SOCKET = "/run/agentbus/proxy.sock"
"""Where the worker's proxy socket is mounted in the sandbox."""


@dataclass(frozen=True, slots=True)
class NetworkBridge:
    """The way out of a sandbox's empty network namespace: the worker's proxy socket, mounted in it, and the
    bridge program (Python source, run by the sandbox's own ``python``) that forwards a loopback port to it.
    The bridge listens, then returns (a forked child serves): the command starts once it is ready."""

    socket: str
    """The proxy's Unix socket on the worker's side."""
    program: str
    """The bridge's source, run as ``python -I -S -c PROGRAM PORT SOCKET``."""
    python: str = "/usr/bin/python3"
    port: int = BRIDGE_PORT

    def setup(self, program_arg: int) -> str:
        """The prelude's step starting the bridge (``$program_arg`` holds the program)."""
        argv = [self.python, "-I", "-S", "-c", f'"${program_arg}"', str(self.port), BRIDGE_SOCKET]
        return " ".join(item if item.startswith('"$') else shlex.quote(item) for item in argv)


@dataclass(frozen=True, slots=True)
class SandboxPlan:
    """Everything one sandboxed command needs, resolved by the caller (paths absolute, ``bwrap`` found)."""

    bwrap: str
    workspace: str
    system_paths: Sequence[str] = DEFAULT_SYSTEM_PATHS
    tmp_size_mb: int = 256
    limits: SandboxLimits = field(default_factory=SandboxLimits)
    drop: DropPrivileges | None = None
    """Set when the worker is root (see the module docstring)."""
    hostname: str = "sandbox"
    network: NetworkBridge | None = None
    """Set when commands may reach allow-listed domains through the worker's proxy."""


def bubblewrap_argv(plan: SandboxPlan, shell: str, command: str) -> list[str]:
    """``bwrap … -- [setpriv … unshare …] shell -c PRELUDE shell COMMAND`` (see the module docstring)."""
    argv = [
        plan.bwrap,
        "--die-with-parent",
        "--new-session",
        "--unshare-pid",
        "--unshare-ipc",
        "--unshare-net",
        "--unshare-uts",
        "--unshare-cgroup-try",
        "--hostname",
        plan.hostname,
    ]
    argv += ["--unshare-user"] if plan.drop is None else []
    # The private /tmp first: a read-only path under /tmp (a virtualenv of a checkout in /tmp) mounted before it
    # was hidden by it, so a sandboxed MCP server could not find its own interpreter.
    argv += ["--perms", "1777", "--size", str(plan.tmp_size_mb * 1024 * 1024), "--tmpfs", "/tmp"]
    for path in plan.system_paths:  # a deeper path (a virtualenv) gets searchable ancestors, as the workspace does
        for ancestor in _ancestors(path):
            argv += ["--perms", "0755", "--dir", ancestor]
        argv += ["--ro-bind-try", path, path]
    argv += ["--proc", "/proc", "--dev", "/dev"]
    for ancestor in _ancestors(plan.workspace):  # made by bwrap for the mount point: searchable, or only the
        argv += ["--perms", "0755", "--dir", ancestor]  # cwd would reach the workspace, not its absolute path
    argv += ["--bind", plan.workspace, plan.workspace, "--chdir", plan.workspace]
    if plan.network is not None:
        for ancestor in _ancestors(BRIDGE_SOCKET):  # searchable by the command's (unprivileged) user
            argv += ["--perms", "0755", "--dir", ancestor]
        argv += ["--ro-bind", plan.network.socket, BRIDGE_SOCKET]
    if plan.drop is not None:  # setpriv needs these two; it gives up every capability when it switches user
        argv += ["--cap-add", "CAP_SETUID", "--cap-add", "CAP_SETGID"]
    else:
        argv += ["--cap-drop", "ALL"]
    argv.append("--")
    if plan.drop is not None:
        argv += plan.drop.argv()
    if plan.network is None:
        return argv + limited_shell_argv(shell, command, plan.limits)
    bridge = plan.network
    return argv + limited_shell_argv(shell, command, plan.limits, setup=bridge.setup(2), setup_args=[bridge.program])


def _ancestors(path: str) -> list[str]:
    """``/a/b/c`` → ``["/a", "/a/b"]`` (an existing directory is left as it is by ``--dir``)."""
    parts = [part for part in path.split("/") if part]
    return ["/" + "/".join(parts[:end]) for end in range(1, len(parts))]
