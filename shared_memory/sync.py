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

import atexit
import contextlib
import os
import sys
import threading
import warnings
import weakref
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from functools import update_wrapper
from typing import Any, Concatenate, Generic, ParamSpec, TypeVar, overload

from .errors import StoreClosedError
from .portal import EXIT_TIMEOUT, Portal, _awaited
from .signing import HeadSigner
from .store import AsyncStore
from .urls import redact_url

P = ParamSpec("P")
T = TypeVar("T")


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
            return store._call(method, *args, **kwargs)

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
            store._check_open()
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
        if self._owns_portal:
            self.portal.owner = f"the store {redact_url(inner.url)}"
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
        # A store never closed is closed when it is dropped, or at exit, with a warning.
        self._left_open = weakref.finalize(
            self, _close_left_open, inner, self.portal, self._owns_portal, _opener()
        )
        self._left_open.atexit = False  # `_close_stores_at_exit` runs it, earlier
        _LEFT_OPEN.add(self._left_open)
        _watch_exit()

    @property
    def url(self) -> str:
        return self.aio.url

    @property
    def signer(self) -> HeadSigner | None:
        """Signs the head advances and owner changes this store's agent makes (see `signing`);
        the same setting as `store.aio.signer`."""
        return self.aio.signer

    @signer.setter
    def signer(self, signer: HeadSigner | None) -> None:
        self.aio.signer = signer

    def __repr__(self) -> str:
        return f"<Store {self.aio!r}>"

    @property
    def closed(self) -> bool:
        """Whether `close()` was called: every use now raises `StoreClosedError`."""
        return self._closed or self.aio.closed

    def _check_open(self) -> None:
        if self.closed:
            raise StoreClosedError(
                f"the store {redact_url(self.url)} is closed: open a new one to use it again"
            )

    def _call(self, fn: Callable[P, Awaitable[T]], /, *args: P.args, **kwargs: P.kwargs) -> T:
        """`fn(*args, **kwargs)` on this store's portal, on an open store."""
        self._check_open()
        return self.portal.call(fn, *args, **kwargs)

    async def _acall(
        self, fn: Callable[P, Awaitable[T]], /, *args: P.args, **kwargs: P.kwargs
    ) -> T:
        """`_call` from async code (see `Portal.acall`)."""
        self._check_open()
        return await self.portal.acall(fn, *args, **kwargs)

    def _run(self, awaitable: Awaitable[T]) -> T:
        """Await `awaitable` (made from `self.aio`) on this store's portal. On a closed store it
        is closed unawaited (no "never awaited" warning) and `StoreClosedError` raised."""
        if self.closed:
            close = getattr(awaitable, "close", None)
            if close is not None:
                close()
            self._check_open()
        return self._call(_awaited, awaitable)

    def _stop_portal(self) -> None:
        if self._owns_portal:
            self.portal.close()

    def close(self) -> None:
        if not self._closed:
            self._closed = True
            self._left_open.detach()
            _LEFT_OPEN.discard(self._left_open)
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
    read = twin(AsyncStore.read)
    read_flow = twin(AsyncStore.read_flow)
    transact = twin(AsyncStore.transact)

    def iter_changes(self, since: int = 0) -> Iterator[Any]:
        """Every change after `since` that exists now (does not wait for new ones)."""
        while batch := self.changes(since):
            yield from batch
            since = batch[-1].seq


_LEFT_OPEN: set[weakref.finalize[Any, Store]] = set()
_exit_lock = threading.Lock()
_exit_watched = False


def _close_left_open(
    inner: AsyncStore, portal: Portal, owned: bool, opened_at: tuple[str, int]
) -> None:
    """Close a sync store its user never closed (dropped, or still open at exit), and say so
    once, pointing at the line that opened it."""
    if portal.in_thread:  # dropped on its own loop: closing it cannot wait there
        closing = threading.Thread(target=_close_now, args=(inner, portal, owned), daemon=True)
        closing.start()
    else:
        _close_now(inner, portal, owned)
    warnings.warn_explicit(
        f"planfence store {redact_url(inner.url)} was never closed: close it, or open it "
        "with `with open_store(...) as store:`",
        ResourceWarning,
        *opened_at,
    )


def _opener() -> tuple[str, int]:
    """The file and line, outside planfence, that is opening a store."""
    frame = sys._getframe(1)
    while frame.f_back is not None and frame.f_code.co_filename.startswith(_PACKAGE_DIR):
        frame = frame.f_back
    return frame.f_code.co_filename, frame.f_lineno


_PACKAGE_DIR = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _close_now(inner: AsyncStore, portal: Portal, owned: bool) -> None:
    try:
        if not portal._closed:
            # Bounded: a store that cannot close (a server gone) must not hold up the exit.
            with contextlib.suppress(Exception):
                portal.call_within(EXIT_TIMEOUT, inner.aclose)
    finally:
        if owned:
            portal.close()


def _close_stores_at_exit() -> None:
    for finalizer in list(_LEFT_OPEN):
        try:
            finalizer()
        except Exception as exc:  # warnings made errors (-W error): still close the others
            sys.excepthook(type(exc), exc, exc.__traceback__)
    _LEFT_OPEN.clear()


def _watch_exit() -> None:
    """Close stores left open when the interpreter exits: before it joins its threads (the
    SQLite store's worker thread among them), so closing one can still use them."""
    global _exit_watched
    with _exit_lock:
        if _exit_watched:
            return
        _exit_watched = True
        register = getattr(threading, "_register_atexit", None)
        try:
            if register is None:
                raise RuntimeError
            register(_close_stores_at_exit)
        except RuntimeError:  # no such hook, or the interpreter is already shutting down
            atexit.register(_close_stores_at_exit)


__all__ = ["Portal", "Store", "stream_twin", "twin"]
