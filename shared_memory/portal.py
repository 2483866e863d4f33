"""`Portal`: an event loop on a daemon thread, and the one way planfence's sync code runs its
async code there (see `sync`)."""

from __future__ import annotations

import contextlib
import threading
import weakref
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from concurrent.futures import Future
from concurrent.futures import TimeoutError as FutureTimeout
from functools import partial
from typing import ParamSpec, TypeVar

import anyio.to_thread
from anyio.from_thread import BlockingPortal

from .errors import StoreClosedError

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

    The thread never keeps the interpreter alive: a portal still open at exit is stopped then
    (what it still runs is cancelled), and the interpreter does not wait for a loop that does
    not stop in time.
    """

    _shared: Portal | None = None
    _shared_lock = threading.Lock()

    def __init__(self, name: str = "planfence-portal") -> None:
        self._closed = False
        self.owner = "planfence's event loop"
        """What a call after `close` names as closed (a `Store` names itself)."""
        started: Future[BlockingPortal] = Future()
        self._thread = threading.Thread(target=_run_portal, args=(started,), name=name, daemon=True)
        self._thread.start()
        self._portal = started.result()
        # At exit, before the interpreter starts tearing down (when a daemon thread can no
        # longer run): stop the loop if nobody closed it.
        self._at_exit = weakref.finalize(self, _stop_portal, self._portal, self._thread)

    @classmethod
    def shared(cls) -> Portal:
        """The process-wide portal for async stores driven from sync code."""
        with cls._shared_lock:
            if cls._shared is None or cls._shared._closed:
                cls._shared = Portal("planfence-shared-portal")
            return cls._shared

    @property
    def in_thread(self) -> bool:
        """True when called from the portal's own event loop thread (that thread object: a
        new thread may reuse the id of a portal thread that has ended)."""
        return threading.current_thread() is self._thread

    def call(self, fn: Callable[P, Awaitable[T]], /, *args: P.args, **kwargs: P.kwargs) -> T:
        """Run `fn(*args, **kwargs)` on the portal's loop and wait for its result."""
        if self.in_thread:
            raise RuntimeError("a sync planfence call from inside its own portal thread")
        self._check_open()
        try:
            # The coroutine is made on the loop: one never started is never left unawaited.
            return self._portal.call(partial(fn, *args, **kwargs))
        except RuntimeError:
            self._check_open()  # closed by another thread meanwhile: the loop has stopped
            raise

    def _check_open(self) -> None:
        if self._closed:
            raise StoreClosedError(f"{self.owner} is closed: open a new one to use it again")

    def call_within(
        self, timeout: float, fn: Callable[P, Awaitable[T]], /, *args: P.args, **kwargs: P.kwargs
    ) -> T:
        """`call`, giving up (`TimeoutError`, the call cancelled) after `timeout` seconds."""
        self._check_open()
        future = self._portal.start_task_soon(partial(fn, *args, **kwargs))
        try:
            return future.result(timeout)
        except FutureTimeout:
            future.cancel()
            raise TimeoutError(f"gave up after {timeout:g} s") from None

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
            self._at_exit()


# How long exit waits for a loop, or a store left open, to finish closing.
EXIT_TIMEOUT = 2.0


def _run_portal(started: Future[BlockingPortal]) -> None:
    async def serve() -> None:
        async with BlockingPortal() as portal:
            started.set_result(portal)
            await portal.sleep_until_stopped()

    try:
        anyio.run(serve)
    except BaseException as exc:
        if not started.done():
            started.set_exception(exc)
        else:
            raise


def _stop_portal(portal: BlockingPortal, thread: threading.Thread) -> None:
    if threading.current_thread() is thread:  # dropped on its own loop: stop it from outside
        threading.Thread(target=_stop_portal, args=(portal, thread), daemon=True).start()
        return
    with contextlib.suppress(RuntimeError, FutureTimeout):  # already stopped
        portal.start_task_soon(portal.stop, True).result(EXIT_TIMEOUT)
    thread.join(EXIT_TIMEOUT)


__all__ = ["EXIT_TIMEOUT", "Portal"]
