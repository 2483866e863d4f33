"""Where a SQLite store's calls run: on the store's own thread (`io="thread"`, the default), or
on the caller's event loop (`io="loop"`).

On its thread, a call costs a hand-off each way, which on a small virtual machine is most of a
fast call's latency. On the loop, a call runs at once, and a server whose every gated request
reads and writes the store answers sooner; but the loop is busy for the call's duration, and it
must never sleep waiting for another process's lock. So a store on the loop has no busy timeout:
a write on the loop asks for the write lock without waiting and, when another connection holds
it, goes to the thread, which waits for it (polling) as long as the store's busy timeout allows.
A read that finds the database locked (only while another process recovers it after a crash,
or holds it exclusively) fails at once with `StoreUnavailableError`, which a gate turns into a
block. A call that finds the thread busy with an earlier call queues behind it there, so calls
never run side by side.
"""

from __future__ import annotations

import asyncio
import sqlite3
import threading
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Final, TypeVar

from ..errors import ConfigError
from .sqlite_files import _is_busy, _until_not_busy

T = TypeVar("T")
IO_MODES: Final = ("thread", "loop")


class Busy(Exception):
    """A write on the loop found the write lock taken, before it changed anything."""


class SQLiteRunner:
    """Runs a store's calls on its thread or on the loop, one at a time."""

    def __init__(self, io: str, busy_timeout: float) -> None:
        if io not in IO_MODES:
            raise ConfigError(f"io must be one of {', '.join(IO_MODES)}, not {io!r}")
        self.io = io
        self.busy_timeout = busy_timeout
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="planfence-sqlite")
        self._lock = threading.Lock()
        self._on_loop = False  # a call is running on the loop (it holds the lock)

    @property
    def connection_timeout(self) -> float:
        """The busy timeout the connection gets: none on the loop (it waits by polling)."""
        return 0.0 if self.io == "loop" else self.busy_timeout

    async def call(self, fn: Callable[[], T], *, may_run_on_loop: bool = True) -> T:
        if may_run_on_loop and self.io == "loop" and self._lock.acquire(blocking=False):
            try:
                self._on_loop = True
                return fn()
            except Busy:
                pass  # nothing was written: run it again on the thread, which may wait
            finally:
                self._on_loop = False
                self._lock.release()
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._executor, self._locked, fn)

    def _locked(self, fn: Callable[[], T]) -> T:
        with self._lock:
            return fn()

    def begin_write(self, conn: sqlite3.Connection) -> None:
        """`BEGIN IMMEDIATE`: on the loop without waiting for the lock (else `Busy`); on the
        thread of a store whose connection does not wait, waiting by polling."""
        if self.io == "thread":
            conn.execute("BEGIN IMMEDIATE")
        elif self._on_loop:
            try:
                conn.execute("BEGIN IMMEDIATE")
            except sqlite3.OperationalError as exc:
                if _is_busy(exc):
                    raise Busy from None
                raise
        else:
            _until_not_busy(lambda: conn.execute("BEGIN IMMEDIATE"), self.busy_timeout)

    def shutdown(self) -> None:
        self._executor.shutdown(wait=False)
