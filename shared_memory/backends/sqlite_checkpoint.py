"""Checkpoints off the write path.

In WAL mode a commit appends pages to the log; a checkpoint copies them into the database file
and syncs it. SQLite's automatic checkpoint runs inside whichever commit crosses the threshold,
so one write in a few hundred pays a disk sync. A store writes its audit record on every gated
call, so that sync would land on gated calls. Instead, a store's own checkpoint thread, with its
own connection, checkpoints after every `every` commits and when writes pause: first a passive
checkpoint, which copies the log into the database and syncs it beside the writers, then a
restart, which holds writers back only while it copies the frames added meanwhile (a log written
to without a pause would otherwise never start over and would grow until the backstop).
SQLite's automatic checkpoint stays on at a much higher threshold, as a backstop should this
thread fall behind.
"""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Callable

# Backstop for the commit-time checkpoint, in pages (SQLite's default is 1000).
AUTOCHECKPOINT_PAGES = 20_000
# Bytes the log file is cut back to when it starts over (it is reused, not shrunk, otherwise).
WAL_SIZE_LIMIT = 4 << 20


class Checkpointer:
    """Runs `PRAGMA wal_checkpoint(PASSIVE)` on its own thread and connection."""

    def __init__(
        self,
        connect: Callable[[], sqlite3.Connection],
        *,
        every: int = 200,
        idle: float = 1.0,
    ) -> None:
        self._connect = connect
        self.every = every
        self.idle = idle
        self._commits = 0
        self._dirty = False
        self._wake = threading.Event()
        self._stop = False
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()

    def committed(self) -> None:
        """Called after each commit (on the store's database thread)."""
        self._commits += 1
        self._dirty = True
        if self._thread is None:
            self._start()
        if self._commits >= self.every:
            self._commits = 0
            self._wake.set()

    def _start(self) -> None:
        with self._lock:
            if self._thread is None and not self._stop:
                self._thread = threading.Thread(
                    target=self._loop, name="planfence-sqlite-checkpoint", daemon=True
                )
                self._thread.start()

    def _loop(self) -> None:
        conn: sqlite3.Connection | None = None
        try:
            while True:
                woken = self._wake.wait(self.idle)
                self._wake.clear()
                if self._stop:
                    return
                if not (woken or self._dirty):
                    continue
                self._dirty = False
                try:
                    if conn is None:
                        conn = self._connect()
                    # The copy and its disk sync, beside the writers; then a short restart (it
                    # waits for the writer lock and finishes the few frames added meanwhile), so
                    # the next write starts the log from its beginning again.
                    conn.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchall()
                    conn.execute("PRAGMA wal_checkpoint(RESTART)").fetchall()
                except sqlite3.Error:
                    # Busy, or the file is gone: the commit-time backstop still bounds the log.
                    pass
        finally:
            if conn is not None:
                conn.close()

    def close(self) -> None:
        with self._lock:
            self._stop = True
            thread, self._thread = self._thread, None
        self._wake.set()
        if thread is not None:
            thread.join(timeout=5)
