"""`planfence ui`: a read-only local web app over a store's decisions, plans and keys.

It runs on Starlette (the `http` extra: `pip install 'planfence[http]'`), ships every asset in
the package (no CDN), binds loopback by default, answers only requests addressed to a loopback
host name (or the host it was told to serve), and escapes every value that comes from the store.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from planfence.adapters._lazy import lazy_exports

if TYPE_CHECKING:
    from .app import create_app

__all__ = ["create_app"]

__getattr__, __dir__ = lazy_exports(__name__, {"create_app": "app"}, globals())
