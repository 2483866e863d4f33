"""Sync code over the async store, through one portal.

`Portal` is the only bridge from synchronous code to planfence's async code: an anyio blocking
portal whose event loop runs on a daemon thread. Everything sync goes through it:

- `Store`, the synchronous twin of `AsyncStore`: each of its methods is generated from the async
  method of the same name (`twin`, `stream_twin`), so the two cannot drift apart.
- `StoreBridge`, for code that accepts either kind of store (or a URL) and has to reach the async
  store from sync and from async code: adapters, the gate's middleware.

A sync `Store` owns its portal (its store's connections belong to that loop); an `AsyncStore`
driven from sync code runs on one process-wide portal (`Portal.shared()`), which suits the memory
and SQLite backends; give sync code a sync `Store` for PostgreSQL.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from contextlib import AbstractContextManager
from functools import partial, update_wrapper
from typing import Any, Concatenate, Generic, ParamSpec, TypeVar, overload

import anyio.to_thread
from anyio.from_thread import BlockingPortal, start_blocking_portal

from .errors import ConfigError
from .store import AsyncStore

P = ParamSpec("P")
T = TypeVar("T")

_DONE = object()


async def _awaited(awaitable: Awaitable[T]) -> T:
    return await awaitable


async def _next_or_done(items: AsyncIterator[T]) -> T | object:
    try:
        return await items.__anext__()
    except StopAsyncIteration:
        return _DONE


class Portal:
    """An event loop on a daemon thread, and the way sync code runs coroutines on it.

    `call` blocks the calling thread until the coroutine is done; `acall` does the same from a
    coroutine on another loop without blocking that loop; `iterate` walks an async iterator.
    Calls made from the portal's own thread run directly instead of waiting on themselves.
    """

    _shared: Portal | None = None
    _shared_lock = threading.Lock()

    def __init__(self, name: str = "planfence-portal") -> None:
        self._cm: AbstractContextManager[BlockingPortal] = start_blocking_portal(name=name)
        self._portal = self._cm.__enter__()
        self._thread_id = self._portal.call(_thread_id)
        self._closed = False

    @classmethod
    def shared(cls) -> Portal:
        """The process-wide portal for async stores driven from sync code."""
        with cls._shared_lock:
            if cls._shared is None or cls._shared._closed:
                cls._shared = Portal("planfence-shared-portal")
            return cls._shared

    @property
    def in_thread(self) -> bool:
        """True when called from the portal's own event loop thread."""
        return threading.get_ident() == self._thread_id

    def call(self, fn: Callable[P, Awaitable[T]], /, *args: P.args, **kwargs: P.kwargs) -> T:
        """Run `fn(*args, **kwargs)` on the portal's loop and wait for its result."""
        if self.in_thread:
            raise RuntimeError("a sync planfence call from inside its own portal thread")
        # The coroutine is made on the loop: one never started is never left unawaited.
        return self._portal.call(partial(fn, *args, **kwargs))

    async def acall(self, fn: Callable[P, Awaitable[T]], /, *args: P.args, **kwargs: P.kwargs) -> T:
        """`call` from async code: waits in a worker thread, so the caller's loop keeps going."""
        if self.in_thread:
            return await fn(*args, **kwargs)
        return await anyio.to_thread.run_sync(partial(self.call, fn, *args, **kwargs))

    def iterate(
        self, fn: Callable[P, AsyncIterator[T]], /, *args: P.args, **kwargs: P.kwargs
    ) -> Iterator[T]:
        """Walk `fn(*args, **kwargs)`, an async iterator, one item per portal call."""
        items = fn(*args, **kwargs)
        try:
            while (item := self.call(_next_or_done, items)) is not _DONE:
                yield item  # type: ignore[misc]
        finally:
            close = getattr(items, "aclose", None)
            if close is not None and not self._closed:
                self.call(close)

    def close(self) -> None:
        if not self._closed:
            self._closed = True
            self._cm.__exit__(None, None, None)


async def _thread_id() -> int:
    return threading.get_ident()


class twin(Generic[P, T]):
    """A `Store` method that runs the `AsyncStore` method of the same name through the portal.

    The async method is looked up on the wrapped store at call time, so a backend's own version
    is the one that runs; signature and docstring are the async method's.
    """

    def __init__(self, method: Callable[Concatenate[AsyncStore, P], Awaitable[T]]) -> None:
        self.name = method.__name__
        self.__doc__ = method.__doc__

    @overload
    def __get__(self, store: None, owner: type[Any]) -> twin[P, T]: ...
    @overload
    def __get__(self, store: Store, owner: type[Any]) -> Callable[P, T]: ...
    def __get__(self, store: Store | None, owner: type[Any]) -> twin[P, T] | Callable[P, T]:
        if store is None:
            return self
        method: Callable[P, Awaitable[T]] = getattr(store.aio, self.name)

        def run(*args: P.args, **kwargs: P.kwargs) -> T:
            return store.portal.call(method, *args, **kwargs)

        return update_wrapper(run, method)


class stream_twin(Generic[P, T]):
    """A `Store` method that walks an `AsyncStore` async iterator method through the portal."""

    def __init__(self, method: Callable[Concatenate[AsyncStore, P], AsyncIterator[T]]) -> None:
        self.name = method.__name__
        self.__doc__ = method.__doc__

    @overload
    def __get__(self, store: None, owner: type[Any]) -> stream_twin[P, T]: ...
    @overload
    def __get__(self, store: Store, owner: type[Any]) -> Callable[P, Iterator[T]]: ...
    def __get__(
        self, store: Store | None, owner: type[Any]
    ) -> stream_twin[P, T] | Callable[P, Iterator[T]]:
        if store is None:
            return self
        method: Callable[P, AsyncIterator[T]] = getattr(store.aio, self.name)

        def run(*args: P.args, **kwargs: P.kwargs) -> Iterator[T]:
            return store.portal.iterate(method, *args, **kwargs)

        return update_wrapper(run, method)


class Store:
    """Synchronous store. Build with `planfence.shared_memory.open_store(url)`.

    Every public coroutine method of `AsyncStore` has a twin here with the same signature
    (a test holds the two lists together); `subscribe` becomes a plain iterator.
    """

    def __init__(self, inner: AsyncStore, *, portal: Portal | None = None) -> None:
        self.aio = inner
        self._owns_portal = portal is None
        self.portal = Portal() if portal is None else portal
        self._closed = False
        try:
            self.portal.call(inner.setup)
        except BaseException:
            self._closed = True
            try:
                self.portal.call(inner.aclose)
            finally:
                self._stop_portal()
            raise

    @property
    def url(self) -> str:
        return self.aio.url

    def __repr__(self) -> str:
        return f"<Store {self.aio!r}>"

    def _run(self, awaitable: Awaitable[T]) -> T:
        """Await `awaitable` (made from `self.aio`) on this store's portal."""
        return self.portal.call(_awaited, awaitable)

    def _stop_portal(self) -> None:
        if self._owns_portal:
            self.portal.close()

    def close(self) -> None:
        if not self._closed:
            self._closed = True
            try:
                self.portal.call(self.aio.aclose)
            finally:
                self._stop_portal()

    def __enter__(self) -> Store:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # One line per AsyncStore method; `tests/store/test_store_sync.py` checks none is missing.
    own = twin(AsyncStore.own)
    transfer = twin(AsyncStore.transfer)
    reassign = twin(AsyncStore.reassign)
    epoch = twin(AsyncStore.epoch)
    owner = twin(AsyncStore.owner)
    put = twin(AsyncStore.put)
    add = twin(AsyncStore.add)
    advance = twin(AsyncStore.advance)
    write = twin(AsyncStore.write)
    lease = twin(AsyncStore.lease)
    release = twin(AsyncStore.release)
    get = twin(AsyncStore.get)
    resolve_id = twin(AsyncStore.resolve_id)
    get_many = twin(AsyncStore.get_many)
    head = twin(AsyncStore.head)
    heads = twin(AsyncStore.heads)
    states = twin(AsyncStore.states)
    keys = twin(AsyncStore.keys)
    frontier = twin(AsyncStore.frontier)
    lineage = twin(AsyncStore.lineage)
    changes = twin(AsyncStore.changes)
    last_seq = twin(AsyncStore.last_seq)
    subscribe = stream_twin(AsyncStore.subscribe)
    log = twin(AsyncStore.log)
    journal = twin(AsyncStore.journal)
    decisions = twin(AsyncStore.decisions)
    read = twin(AsyncStore.read)
    read_flow = twin(AsyncStore.read_flow)
    transact = twin(AsyncStore.transact)

    def iter_changes(self, since: int = 0) -> Iterator[Any]:
        """Every change after `since` that exists now (does not wait for new ones)."""
        while batch := self.changes(since):
            yield from batch
            since = batch[-1].seq


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
            return store.portal.call(fn, store.aio, *args, **kwargs)
        return Portal.shared().call(self._on_async, fn, *args, **kwargs)

    def run(self, fn: Callable[P, Awaitable[T]], /, *args: P.args, **kwargs: P.kwargs) -> T:
        """Run an async function that reaches the store through this bridge, from sync code,
        on the loop the store lives on (so its own `acall`s go straight to the store)."""
        store = self.store
        portal = store.portal if isinstance(store, Store) else Portal.shared()
        return portal.call(fn, *args, **kwargs)

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
            return await store.portal.acall(fn, store.aio, *args, **kwargs)
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
            from .factory import create_async_store  # the factory imports this module

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


__all__ = ["Portal", "Store", "StoreBridge", "stream_twin", "twin"]
