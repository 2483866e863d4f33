"""Open a store from a URL: `memory://`, `sqlite:///path.db`, `postgresql://...`."""

from __future__ import annotations

import os

from .base import AsyncStore
from .errors import ConfigError
from .records import DEFAULT_LIMITS, StoreLimits
from .sync import Store

DEFAULT_STORE_URL = "sqlite:///.planfence/memory.db"
STORE_ENV = "PLANFENCE_STORE"


def default_store_url() -> str:
    return os.environ.get(STORE_ENV) or DEFAULT_STORE_URL


def create_async_store(
    url: str | None = None, *, limits: StoreLimits = DEFAULT_LIMITS
) -> AsyncStore:
    """Build (but do not connect) the backend for `url`; `await store.setup()` or `async with`."""
    url = url or default_store_url()
    if url.startswith("memory://"):
        from .backends.memory import MemoryStore

        return MemoryStore(limits=limits)
    if url.startswith("sqlite://"):
        from .backends.sqlite import SQLiteStore, sqlite_options_from_url, sqlite_path_from_url

        options = sqlite_options_from_url(url)
        return SQLiteStore(
            sqlite_path_from_url(url),
            limits=limits,
            synchronous=options.get("synchronous", "NORMAL"),
        )
    if url.startswith(("postgresql://", "postgres://")):
        from .backends.postgres import PostgresStore

        return PostgresStore(url, limits=limits)
    raise ConfigError(
        f"unsupported store URL {url!r}: use memory://, sqlite:///path.db or postgresql://..."
    )


async def open_async_store(
    url: str | None = None, *, limits: StoreLimits = DEFAULT_LIMITS
) -> AsyncStore:
    store = create_async_store(url, limits=limits)
    await store.setup()
    return store


def open_store(url: str | None = None, *, limits: StoreLimits = DEFAULT_LIMITS) -> Store:
    """A ready synchronous store for `url` (default: $PLANFENCE_STORE or the local SQLite file)."""
    return Store(create_async_store(url, limits=limits))
