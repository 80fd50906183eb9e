"""Which build is running: the package version and the git commit it was built from.

The commit comes from, in order:

1. ``AGENTBUS_BUILD_COMMIT`` — the Docker image bakes it in (``--build-arg AGENTBUS_BUILD_COMMIT=…``;
   the image has no ``.git``: ``.dockerignore`` keeps it out of the build context);
2. ``git describe --always --dirty`` when this code runs from a git checkout (``uv run`` in a clone);
3. ``"unknown"`` (an installed wheel built without the variable).
"""

from __future__ import annotations

import functools
import os
import subprocess
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

DISTRIBUTION = "agentbus-redis"
"""The name agentbus is installed under (``agentbus`` on PyPI is another project; see the README)."""
UNKNOWN = "unknown"
_CHECKOUT_ROOT = Path(__file__).resolve().parents[3]
"""Where ``.git`` sits when this file is run from a clone (services/agentbus_redis/config/build_info.py → root)."""


def package_version() -> str:
    """The installed distribution's version (pyproject.toml's ``version``)."""
    try:
        return version(DISTRIBUTION)
    except PackageNotFoundError:
        return UNKNOWN


@functools.cache
def build_commit() -> str:
    """The commit of the running code, ``"unknown"`` when no source says (see the module docstring)."""
    baked = os.environ.get("AGENTBUS_BUILD_COMMIT", "").strip()
    if baked and baked != UNKNOWN:
        return baked
    if not (_CHECKOUT_ROOT / ".git").exists():  # a directory in a clone, a file in a worktree
        return UNKNOWN
    try:
        described = subprocess.run(
            ["git", "-C", str(_CHECKOUT_ROOT), "describe", "--always", "--dirty", "--abbrev=12"],
            capture_output=True,
            text=True,
            timeout=5,
            check=True,
        )
    except (OSError, subprocess.SubprocessError):  # no git on the PATH, not a repository, too slow
        return UNKNOWN
    return described.stdout.strip() or UNKNOWN
