"""Base memory updaters Janus wraps: DC-RS (cheatsheet) and ExpeL (insight rules)."""

from .base import MemoryUpdater
from .dcrs import DCRSUpdater
from .expel import ExpeLUpdater

__all__ = [
    "DCRSUpdater",
    "ExpeLUpdater",
    "MemoryUpdater",
]
