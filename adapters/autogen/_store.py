"""Where an AutoGen component finds its shared-memory store, and how it reaches it.

Components must survive `dump_component` / `load_component`, so they carry the store as a URL.
A store handed over as an object is registered under its URL, so a component reloaded in the same
process (an in-memory store above all) finds the very same store instead of an empty twin.
"""

from __future__ import annotations

import asyncio
import itertools
import weakref
from collections.abc import Awaitable, Callable
from typing import TypeVar

from planfence.shared_memory import AsyncStore, ConfigError, Store, create_async_store

T = TypeVar("T")

_LIVE: weakref.WeakValueDictionary[str, AsyncStore | Store] = weakref.WeakValueDictionary()
_NAMES: weakref.WeakKeyDictionary[AsyncStore | Store, str] = weakref.WeakKeyDictionary()
_COUNTER = itertools.count(1)


def store_url(store: AsyncStore | Store) -> str:
    """The URL a component dumps for `store`; registered so reloads in this process reuse it."""
    name = _NAMES.get(store)
    if name is None:
        name = store.url or "memory://"
        if name.startswith("memory://"):
            # Every in-memory store answers to "memory://": give each its own process-local name.
            name = f"memory://planfence-{next(_COUNTER)}"
        _NAMES[store] = name
    _LIVE.setdefault(name, store)
    return name


class StoreRef:
    """A store given as an `AsyncStore`, a sync `Store` (its own loop thread), or a URL.

    Work is always run where the store lives: on the caller's loop for an `AsyncStore`, on the
    store's loop thread for a sync `Store`, and a URL is opened on first use.
    """

    def __init__(self, store: AsyncStore | Store | str) -> None:
        self._store: AsyncStore | Store | None = None
        self._owned = False
        self._lock = asyncio.Lock()
        if isinstance(store, str):
            if not store:
                raise ConfigError("a store URL is required")
            self._url = store
            live = _LIVE.get(store)
            if live is not None:
                self._store = live
        elif isinstance(store, AsyncStore | Store):
            self._store = store
            self._url = store_url(store)
        else:
            raise ConfigError(f"expected a store or a store URL, got {type(store).__name__}")

    @property
    def url(self) -> str:
        return self._url

    async def _resolve(self) -> AsyncStore | Store:
        if self._store is None:
            async with self._lock:
                if self._store is None:
                    opened = create_async_store(self._url)
                    await opened.setup()
                    self._store, self._owned = opened, True
        return self._store

    async def run(self, fn: Callable[[AsyncStore], Awaitable[T]]) -> T:
        """Run `fn(async_store)` on the loop the store belongs to."""
        store = await self._resolve()
        if isinstance(store, Store):
            sync = store

            async def bound() -> T:
                return await fn(sync.aio)

            return await asyncio.to_thread(lambda: sync._run(bound()))
        return await fn(store)

    async def aclose(self) -> None:
        """Close the store if this reference opened it (stores handed in belong to the caller)."""
        store, self._store = self._store, None
        if store is not None and self._owned and isinstance(store, AsyncStore):
            await store.aclose()
        self._owned = False
