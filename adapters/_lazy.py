"""Lazy exports for adapter packages: a framework is imported only when one of its names is used,
so a missing extra fails at use, with the pip hint, not at `import planfence.adapters.x`."""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from typing import Any


def lazy_exports(
    package: str, exports: Mapping[str, str], namespace: dict[str, Any]
) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """Module-level `__getattr__` and `__dir__` for `package`: `exports` maps a public name to the
    submodule that defines it; a resolved name is cached in `namespace` (the package globals)."""

    def getattr_(name: str) -> Any:
        module = exports.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        # Each submodule raises MissingExtraError (with the pip hint) when its extra is missing.
        value = getattr(importlib.import_module(f".{module}", package), name)
        namespace[name] = value
        return value

    def dir_() -> list[str]:
        return sorted(set(namespace) | set(exports))

    return getattr_, dir_
