"""The proxy's modules need the `mcp` extra without importing the SDK (which takes longer to
import than the proxy takes to start): they only check that it is installed."""

from __future__ import annotations

import importlib.util


def require(module: str = "mcp") -> None:
    """Raise `ModuleNotFoundError` for `module` when it is not installed (inside
    `extra_imports`, that is `MissingExtraError` with the pip hint), without importing it."""
    if importlib.util.find_spec(module) is None:
        raise ModuleNotFoundError(f"No module named {module!r}", name=module)
