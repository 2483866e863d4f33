"""Base memory updaters Janus wraps: DC-RS (cheatsheet) and ExpeL (insight rules)."""

from .base import MemoryUpdater
from .dcrs import DCRSUpdater
from .expel import ExpeLUpdater, Operation, apply_operations, parse_operations

__all__ = [
    "DCRSUpdater",
    "ExpeLUpdater",
    "MemoryUpdater",
    "Operation",
    "apply_operations",
    "parse_operations",
]
