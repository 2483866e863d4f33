"""`planfence ui`: a read-only local web app over a store's decisions, plans and keys.

It runs on Starlette (part of the base install), ships every asset in the package (no CDN), binds
loopback by default, answers only requests addressed to a loopback host name (or the host it was
told to serve), and escapes every value that comes from the store.
"""

from __future__ import annotations

from .app import create_app

__all__ = ["create_app"]
