"""A stdio MCP server of our own for the sandbox tests (issue 28): its one tool reports what the process can
see and reach — its environment, another process's ``/proc/<pid>/environ``, a TCP port on the loopback, the
paths it can read and write — so a test can assert that a sandboxed server sees none of the worker's secrets.
Run as ``python probe_server.py`` (the mcp SDK's ``MCPServer`` over stdio)."""

from __future__ import annotations

import os
import socket
from pathlib import Path

from mcp.server.mcpserver import MCPServer

server = MCPServer("agentbus-probe")


def _attempt(action: object) -> str:
    try:
        result = action() if callable(action) else action
    except OSError as error:
        return f"refused: {type(error).__name__}: {error.strerror or error}"
    return f"done: {result}"


def _connect(port: int) -> str:
    with socket.create_connection(("127.0.0.1", port), timeout=5) as connection:
        connection.sendall(b"PING\r\n")
        return connection.recv(64).decode(errors="replace")


@server.tool()
def probe(worker_pid: int, port: int, outside: str, written: str) -> dict[str, object]:
    """What this process sees: its environment and working directory, the worker's ``/proc/<worker_pid>/environ``,
    a connection to ``127.0.0.1:<port>``, a listing of ``outside`` and a write of ``written`` (a file name) in its
    working directory and at ``outside``."""
    cwd = Path.cwd()
    return {
        "environ": dict(os.environ),
        "cwd": str(cwd),
        "pid": os.getpid(),
        "uid": os.getuid(),
        "processes": sorted(int(entry) for entry in os.listdir("/proc") if entry.isdigit()),
        "worker_environ": _attempt(lambda: Path(f"/proc/{worker_pid}/environ").read_bytes().decode(errors="replace")),
        "worker_cmdline": _attempt(lambda: Path(f"/proc/{worker_pid}/cmdline").read_bytes().decode(errors="replace")),
        "loopback": _attempt(lambda: _connect(port)),
        "outside_listing": _attempt(lambda: sorted(os.listdir(outside))),
        "outside_write": _attempt(lambda: (Path(outside) / written).write_text("probe")),
        "cwd_write": _attempt(lambda: (cwd / written).write_text("probe")),
        "cwd_listing": sorted(os.listdir(cwd)),
    }


@server.tool()
def fetch(url: str) -> str:
    """The HTTP status of ``url`` (through ``HTTPS_PROXY`` when the environment names one), or the failure."""
    import urllib.error
    import urllib.request

    try:
        with urllib.request.urlopen(url, timeout=60) as answer:
            return f"status {answer.status}"
    except urllib.error.HTTPError as error:
        return f"status {error.code}: {error.headers.get('X-Proxy-Reason', '')}"
    except (urllib.error.URLError, OSError) as error:
        return f"failed: {error}"


if __name__ == "__main__":
    server.run()
