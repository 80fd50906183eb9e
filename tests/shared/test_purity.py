"""shared/ is the pure library: it imports nothing that does I/O (issue 2), nor any room of services/. Two
independent proofs: the import-linter contracts of pyproject.toml, and a direct scan of every import statement."""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
SHARED = REPO / "shared"
SERVICE_ROOMS = {room.name for room in (REPO / "services" / "agentbus_redis").iterdir() if room.is_dir()}
FORBIDDEN = {
    "redis", "faststream", "structlog", "prometheus_client", "services", "socket", "asyncio", "subprocess",
    "os", "pathlib", "io", "logging", "urllib", "http", "shutil", "tempfile", "orjson", "threading",
}  # fmt: skip


LINT_IMPORTS = "import sys; from importlinter.cli import lint_imports_command; sys.exit(lint_imports_command())"


def test_import_linter_contract_is_kept() -> None:
    result = subprocess.run(
        [sys.executable, "-c", LINT_IMPORTS],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "3 kept, 0 broken" in result.stdout


def _forbidden(module: str) -> bool:
    parts = module.split(".")
    return parts[0] in FORBIDDEN or (parts[0] == "agentbus_redis" and len(parts) > 1 and parts[1] in SERVICE_ROOMS)


def test_no_module_of_shared_imports_an_io_library() -> None:
    offenders: list[str] = []
    for path in sorted(SHARED.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            names = (
                [alias.name for alias in node.names]
                if isinstance(node, ast.Import)
                else [node.module or ""]
                if isinstance(node, ast.ImportFrom) and node.level == 0
                else []
            )
            offenders += [f"{path.relative_to(SHARED)}: {name}" for name in names if _forbidden(name)]
    assert offenders == []
