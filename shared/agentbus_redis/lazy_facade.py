"""A package façade that imports a module only when one of its names is asked for (PEP 562 ``__getattr__``):
import time matters for the CLI, which reads a few names of a package and should not pay for the rest.

    from agentbus_redis.lazy_facade import lazy_facade

    __all__ = [...]
    _MODULE_OF = {"Name": "module", ...}  # each public name → the submodule that defines it, or a dotted
                                          # module path for a name re-exported from another package
    __getattr__, __dir__ = lazy_facade(globals(), _MODULE_OF)

The names are imported for type checkers under ``TYPE_CHECKING`` beside it; a name once asked for is kept in
the package's namespace, so the next access does not come here again.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping, MutableMapping
from typing import Any


def lazy_facade(
    namespace: MutableMapping[str, Any], module_of: Mapping[str, str]
) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """The ``__getattr__`` and ``__dir__`` of the package whose ``globals()`` is ``namespace``."""
    package = namespace["__name__"]

    def __getattr__(name: str) -> Any:
        module = module_of.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(module if "." in module else f"{package}.{module}"), name)
        namespace[name] = value
        return value

    def __dir__() -> list[str]:
        return sorted(namespace["__all__"])

    return __getattr__, __dir__
