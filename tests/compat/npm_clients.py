"""The real clients the compat suite runs (and the MCP servers the MCP tests connect to), installed from npm
at pinned versions into a cache outside the repo.

``python -m tests.compat.npm_clients`` installs them (``.ci/run`` calls it so the suite does not pay for
it); the session fixtures call :func:`ensure_installed`, which reuses an installed copy and installs under a
file lock so xdist workers never race. An install that fails because the npm registry cannot be reached is
:class:`NpmUnreachable` (the suite skips with that reason); any other failure is an error.
"""

from __future__ import annotations

import fcntl
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

CLAUDE_CODE_PACKAGE = "@anthropic-ai/claude-code"
CLAUDE_CODE_VERSION = "2.1.332"
PI_PACKAGE = "@mariozechner/pi-coding-agent"
PI_VERSION = "0.73.1"


@dataclass(frozen=True)
class NpmClient:
    package: str
    version: str
    binary: str

    @property
    def spec(self) -> str:
        return f"{self.package}@{self.version}"


CLAUDE_CODE = NpmClient(CLAUDE_CODE_PACKAGE, CLAUDE_CODE_VERSION, "claude")
PI = NpmClient(PI_PACKAGE, PI_VERSION, "pi")
CLIENTS = (CLAUDE_CODE, PI)
MCP_SERVER_EVERYTHING = NpmClient("@modelcontextprotocol/server-everything", "2026.8.31", "mcp-server-everything")
"""The MCP reference server (tests/integration/test_mcp_servers.py): stdio and streamable HTTP."""
MCP_SERVERS = (MCP_SERVER_EVERYTHING,)


class NpmUnreachable(RuntimeError):
    """npm is missing or its registry cannot be reached: the compat suite skips with this reason."""


def cache_root() -> Path:
    """``$AGENTBUS_COMPAT_CACHE``, else ``$XDG_CACHE_HOME/agentbus/compat`` (``~/.cache/agentbus/compat``)."""
    explicit = os.environ.get("AGENTBUS_COMPAT_CACHE")
    if explicit:
        return Path(explicit)
    base = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return base / "agentbus" / "compat"


def install_dir(client: NpmClient) -> Path:
    return cache_root() / client.spec.replace("/", "+")


def binary_path(client: NpmClient) -> Path:
    return install_dir(client) / "node_modules" / ".bin" / client.binary


def _registry_reachable(npm: str) -> bool:
    probe = subprocess.run([npm, "ping"], capture_output=True, text=True, timeout=120, check=False)
    return probe.returncode == 0


def ensure_installed(client: NpmClient) -> Path:
    """The client's executable, installing ``client`` into the cache first when it is not there."""
    binary = binary_path(client)
    if binary.exists():
        return binary
    npm = shutil.which("npm")
    if npm is None:
        raise NpmUnreachable(f"npm is not installed: cannot install {client.spec}")
    root = cache_root()
    root.mkdir(parents=True, exist_ok=True)
    with (root / ".install.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # another worker may be installing the same client
        if binary.exists():
            return binary
        staging = root / f".{install_dir(client).name}.{os.getpid()}"
        shutil.rmtree(staging, ignore_errors=True)
        staging.mkdir()
        result = subprocess.run(
            [npm, "install", "--prefix", str(staging), "--no-audit", "--no-fund", "--no-save", client.spec],
            capture_output=True,
            text=True,
            timeout=900,
            check=False,
        )
        if result.returncode != 0:
            shutil.rmtree(staging, ignore_errors=True)
            if not _registry_reachable(npm):
                raise NpmUnreachable(f"the npm registry cannot be reached: cannot install {client.spec}")
            raise RuntimeError(f"npm install {client.spec} failed:\n{result.stderr[-4000:]}")
        # Renamed into place in one step: a reader sees either no install or a complete one.
        os.replace(staging, install_dir(client))
    return binary


def main() -> int:
    for client in (*CLIENTS, *MCP_SERVERS):
        try:
            path = ensure_installed(client)
        except NpmUnreachable as unreachable:
            print(f"compat clients: skipped ({unreachable})", file=sys.stderr)
            return 0
        print(f"compat clients: {client.spec} at {path}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
