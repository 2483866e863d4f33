"""planfence: no action on a stale plan, no harmful memory update deployed blindly.

This package holds only `__version__`; the product is in its subpackages (`planfence.fence`,
`planfence.shared_memory`, `planfence.plugins.gate`, `planfence.adapters.*`). The version comes
from the installed distribution's metadata, read on first use, so importing a subpackage does
not pay for `importlib.metadata`.
"""

from __future__ import annotations

from functools import cache

UNKNOWN_VERSION = "0+unknown"
"""The version of a source tree whose distribution metadata cannot be found."""


@cache
def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("planfence")
    except PackageNotFoundError:
        return UNKNOWN_VERSION


def __getattr__(name: str) -> str:
    if name == "__version__":
        return _version()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
