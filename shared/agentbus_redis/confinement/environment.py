"""The environment of a sandboxed command: built from an allow-list of names, never from the worker's
whole environment, and never holding a worker secret even when a deployment allow-lists it by mistake."""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping

DEFAULT_ENV_ALLOW: tuple[str, ...] = ("PATH", "LANG", "LANGUAGE", "LC_ALL", "LC_CTYPE", "TZ", "TERM")
"""Names copied from the worker's environment when set (``LC_*`` and the like are named one by one)."""
DEFAULT_PATH = "/usr/local/bin:/usr/bin:/bin:/usr/local/sbin:/usr/sbin:/sbin"
SECRET_NAME = re.compile(
    r"(^(AGENTBUS_|ANTHROPIC_|REDIS_|OTEL_EXPORTER_)|^REDIS_URL$|KEY|TOKEN|SECRET|PASSWORD|PASSWD|CREDENTIAL|AUTH)",
    re.IGNORECASE,
)
"""Names that carry (or may carry) a worker secret: never passed, whatever the allow-list says."""


class SecretInAllowList(ValueError):
    """The allow-list names a variable that may hold a worker secret."""

    def __init__(self, names: list[str]) -> None:
        super().__init__(
            f"the sandbox environment allow-list names {', '.join(names)}, which may hold a worker secret "
            "(REDIS_URL, AGENTBUS_*, ANTHROPIC_*, *KEY*, *TOKEN*, *SECRET*, *PASSWORD*...): remove them"
        )
        self.names = names


def secret_names(allow: Iterable[str]) -> list[str]:
    """The names in ``allow`` that look like secrets (a setting refuses them)."""
    return [name for name in allow if SECRET_NAME.search(name)]


def sandbox_environment(
    source: Mapping[str, str], allow: Iterable[str], *, home: str, fixed: Mapping[str, str] | None = None
) -> dict[str, str]:
    """The allow-listed names of ``source`` that are set (secret-looking names dropped), a ``PATH``,
    ``HOME`` (the workspace) and ``TMPDIR`` (the private ``/tmp``), then ``fixed`` on top."""
    env = {name: source[name] for name in allow if name in source and not SECRET_NAME.search(name)}
    env.setdefault("PATH", DEFAULT_PATH)
    env["HOME"] = home
    env["TMPDIR"] = "/tmp"
    env.update(fixed or {})
    return env
