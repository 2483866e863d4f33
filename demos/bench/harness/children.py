"""Child processes a Ctrl-C at the terminal does not reach.

A Ctrl-C at a terminal signals the whole foreground process group: the benchmark and every
process it started. The benchmark alone handles it (it reports what it measured, then stops its
children itself); a child that got it too would die with a traceback of its own, possibly before
it was ready, and leave the benchmark waiting for it. The HTTP services (`services`) run in
their own session for that reason; `multiprocessing` children, which cannot be started in another
session, start with SIGINT ignored instead: an ignored signal stays ignored across `exec`, and
Python installs no handler of its own for a signal it inherits ignored, so the child never sees
Ctrl-C, not even while it imports.
"""

from __future__ import annotations

import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def ctrl_c_spares_children() -> Iterator[None]:
    """Processes started inside this block ignore SIGINT from their first instruction.

    Use it around `Process.start()` (or a `Pool`'s creation) in the main thread, and keep the
    block short: while it lasts (a few milliseconds per process), the parent ignores SIGINT too,
    and a Ctrl-C in that instant is lost (press it again). Raises `RuntimeError` outside the
    main thread (where signal handlers cannot be changed)."""
    if threading.current_thread() is not threading.main_thread():
        raise RuntimeError("start the benchmark's processes from the main thread")
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)
