"""Lazy exports for adapter packages: a framework is imported only when one of its names is used,
so a missing extra fails at use, with the pip hint, not at `import planfence.adapters.x`."""

from __future__ import annotations

from planfence.shared_memory.extras import lazy_exports

__all__ = ["lazy_exports"]
