"""The proxy's modules need the `mcp` extra without importing the SDK (which takes longer to
import than the proxy takes to start): they only check that it is installed."""

from __future__ import annotations

import importlib.util

from planfence.shared_memory.extras import EXTRA_MODULES


def require(extra: str = "mcp") -> None:
    """Raise `ModuleNotFoundError` for the first module of `extra` that is not installed
    (inside `extra_imports`, that is `MissingExtraError` with the pip hint), importing none."""
    for module in EXTRA_MODULES[extra]:
        if importlib.util.find_spec(module) is None:
            raise ModuleNotFoundError(f"No module named {module!r}", name=module)
