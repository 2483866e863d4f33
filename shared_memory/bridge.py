"""`StoreBridge`: one way to reach a store from sync and async code, wherever it lives (an
`AsyncStore` on the caller's loop, a sync `Store` on its portal, or a URL opened on first use)."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Concatenate, ParamSpec, TypeVar

from .errors import ConfigError
from .factory import create_async_store
from .portal import Portal
from .store import AsyncStore
from .sync import Store

P = ParamSpec("P")
T = TypeVar("T")


class StoreBridge:
    """Reaches an async store from sync or async code, wherever the store lives.

    `store` is an `AsyncStore` (awaited on the caller's loop; sync callers drive it on the shared
    portal), a sync `Store` (its own portal, from both), or a URL (opened on first use, and
    closed by `aclose`; stores handed in belong to the caller).
    """

    def __init__(self, store: AsyncStore | Store | str) -> None:
        self.store: AsyncStore | Store | None = None
        self._owned = False
        self._lock = asyncio.Lock()
        if isinstance(store, str):
            if not store:
                raise ConfigError("a store URL is required")
            self.url = store
        elif isinstance(store, AsyncStore | Store):
            self.store = store
            self.url = store.url
        else:
            raise ConfigError(f"expected a planfence store, got {type(store).__name__}")

    @property
    def aio(self) -> AsyncStore:
        """The async store (for a URL, once opened)."""
        store = self.store
        if store is None:
            raise ConfigError(f"store {self.url!r} is not open yet")
        return store.aio if isinstance(store, Store) else store

    def call(
        self,
        fn: Callable[Concatenate[AsyncStore, P], Awaitable[T]],
        /,
        *args: P.args,
        **kwargs: P.kwargs,
    ) -> T:
        """Run `fn(async_store, ...)` from sync code."""
        store = self.store
        if isinstance(store, Store):
            return store._call(fn, store.aio, *args, **kwargs)
        return Portal.shared().call(self._on_async, fn, *args, **kwargs)

    def run(self, fn: Callable[P, Awaitable[T]], /, *args: P.args, **kwargs: P.kwargs) -> T:
        """Run an async function that reaches the store through this bridge, from sync code,
        on the loop the store lives on (so its own `acall`s go straight to the store)."""
        store = self.store
        if isinstance(store, Store):
            return store._call(fn, *args, **kwargs)
        return Portal.shared().call(fn, *args, **kwargs)

    async def acall(
        self,
        fn: Callable[Concatenate[AsyncStore, P], Awaitable[T]],
        /,
        *args: P.args,
        **kwargs: P.kwargs,
    ) -> T:
        """Run `fn(async_store, ...)` from async code."""
        store = self.store
        if isinstance(store, Store):
            return await store._acall(fn, store.aio, *args, **kwargs)
        return await self._on_async(fn, *args, **kwargs)

    async def _on_async(
        self,
        fn: Callable[Concatenate[AsyncStore, P], Awaitable[T]],
        /,
        *args: P.args,
        **kwargs: P.kwargs,
    ) -> T:
        return await fn(await self._opened(), *args, **kwargs)

    async def _opened(self) -> AsyncStore:
        if self.store is None:
            async with self._lock:
                if self.store is None:
                    opened = create_async_store(self.url)
                    await opened.setup()
                    self.store, self._owned = opened, True
        store = self.store
        return store.aio if isinstance(store, Store) else store

    async def aclose(self) -> None:
        """Close the store if this bridge opened it (it opens again on next use)."""
        store, owned = self.store, self._owned
        if owned and isinstance(store, AsyncStore):
            self.store, self._owned = None, False
            await store.aclose()


__all__ = ["StoreBridge"]
