"""Fixtures of the compat suite: the real clients from npm, the capture server, and fresh client files.

Everything here is session-scoped and made once per xdist worker: the clients are installed into the
cache outside the repo (``tests.compat.npm_clients``), and each fresh file is generated once and shared by
every test that reads it (modules mark themselves slow). Where npm cannot be reached the whole suite
skips with that reason.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.compat.capture_server import CaptureServer
from tests.compat.clients import ClaudeCodeHome, PiHome
from tests.compat.npm_clients import CLAUDE_CODE, PI, NpmClient, NpmUnreachable, ensure_installed
from tests.compat.sessions import FreshFile, claude_fresh_files, pi_fresh_files


def _installed(client: NpmClient) -> Path:
    try:
        return ensure_installed(client)
    except NpmUnreachable as unreachable:
        pytest.skip(f"{client.spec}: {unreachable}")


COMPAT_GROUP = "compat"


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Every compat test on one xdist worker (``--dist loadgroup``): the session-scoped fresh files are
    then generated once per run, not once per worker."""
    for item in items:
        if item.nodeid.startswith("tests/compat/"):
            item.add_marker(pytest.mark.xdist_group(COMPAT_GROUP))


@pytest.fixture(scope="session")
def claude_code_binary() -> Path:
    """Claude Code 2.1.332 from npm (cached outside the repo)."""
    return _installed(CLAUDE_CODE)


@pytest.fixture(scope="session")
def pi_binary() -> Path:
    """pi 0.73.1 from npm (cached outside the repo)."""
    return _installed(PI)


@pytest.fixture(scope="session")
def capture_server() -> Iterator[CaptureServer]:
    """The Anthropic-compatible capture server, bound on 127.0.0.1 before its URL is handed out."""
    server = CaptureServer().start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="session")
def claude_code_files(
    claude_code_binary: Path, capture_server: CaptureServer, tmp_path_factory: pytest.TempPathFactory
) -> list[FreshFile]:
    """Fresh Claude Code 2.1.332 files (parallel/failing tools and thinking, --resume, --continue,
    --fork-session, a permission denial, a sub-agent), each with the client's own last request."""
    root = tmp_path_factory.mktemp("claude-code")
    return claude_fresh_files(lambda name: ClaudeCodeHome(claude_code_binary, capture_server, root / name))


@pytest.fixture(scope="session")
def pi_files(
    pi_binary: Path, capture_server: CaptureServer, tmp_path_factory: pytest.TempPathFactory
) -> list[FreshFile]:
    """Fresh pi 0.73.1 session files (tools and thinking, --continue), each with pi's own last request."""
    return pi_fresh_files(PiHome(pi_binary, capture_server, tmp_path_factory.mktemp("pi")))
