"""The import surface (issue 27): one distinctive namespace, a façade per room, rooms of a livable size.

Every room's ``__all__`` is importable name by name (a façade that names a moved or renamed object fails
here, not in a user's program); no package holds more than about fifteen modules; and nothing but
``agentbus_redis`` is installed at the top level (a user's own ``services`` or ``shared`` is never ours).
"""

from __future__ import annotations

import importlib
import pkgutil
import tomllib
from pathlib import Path

import pytest

import agentbus_redis

REPO = Path(__file__).resolve().parents[1]
MAX_MODULES_PER_PACKAGE = 16
"""About fifteen (the models of issue 27 keep 9–19 at a root); a package past this is split by concept."""


def _packages() -> list[str]:
    found = ["agentbus_redis"]
    for info in pkgutil.walk_packages(agentbus_redis.__path__, "agentbus_redis."):
        if info.ispkg:
            found.append(info.name)
    return sorted(found)


def _facades() -> list[str]:
    return [name for name in _packages() if hasattr(importlib.import_module(name), "__all__")]


@pytest.mark.parametrize("package", _facades())
def test_every_name_a_facade_lists_imports(package: str) -> None:
    module = importlib.import_module(package)
    missing = [name for name in module.__all__ if not hasattr(module, name)]
    assert missing == [], f"{package}.__all__ names what it cannot import: {missing}"


def test_the_rooms_have_facades() -> None:
    rooms = {name.split(".")[1] for name in _facades() if name.count(".") == 1}
    expected = {"api", "approvals", "bus", "messages", "permissions", "streaming", "tools", "sdk", "streams", "stores"}
    assert expected <= rooms


@pytest.mark.parametrize("package", _packages())
def test_no_package_root_is_a_heap(package: str) -> None:
    paths = importlib.import_module(package).__path__
    modules = {p.stem for path in paths for p in Path(path).glob("*.py") if p.name != "__init__.py"}
    assert len(modules) <= MAX_MODULES_PER_PACKAGE, f"{package} holds {len(modules)} modules: split it by concept"


def test_the_wheel_installs_one_distinctive_name() -> None:
    project = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))
    packages = project["tool"]["hatch"]["build"]["targets"]["wheel"]["packages"]
    assert {Path(p).name for p in packages} == {"agentbus_redis"}
    assert project["project"]["name"] == "agentbus-redis"
    assert not (REPO / "shared" / "__init__.py").exists()
    assert not (REPO / "services" / "__init__.py").exists()
