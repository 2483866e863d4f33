"""Child processes that end with the benchmark, whatever ends it (SIGKILL included).

A benchmark stops its children itself on the way out, also after Ctrl-C (`services`,
`children`). A benchmark that is killed has no way out: its children would keep running (an
owner service still listening half an hour later). So each child also watches its parent through
a pipe whose write end only the parent holds: when the parent is gone, for whatever reason, the
kernel closes that end, the child reads end-of-file and stops (SIGTERM to itself, so a server
shuts down cleanly; exit after a grace period if that is not enough).

- A child started with `subprocess`: pass `lifeline()` in `pass_fds` and its number on the
  command line; the child calls `die_with_parent(fd)` first thing.
- A `multiprocessing` child (spawn): it already has such a pipe (its parent's sentinel); it
  calls `die_with_parent()` first thing.
"""

from __future__ import annotations

import contextlib
import multiprocessing
import os
import signal
import threading
import time
from multiprocessing.connection import wait

GRACE_S = 5.0

_pipe: tuple[int, int, int] | None = None  # (read end, write end, pid that made them)


def lifeline() -> int:
    """The read end of this process's lifeline: a pipe nobody writes to, whose write end only
    this process holds (never inherited), so its readers see end-of-file once this process is
    gone. Pass it to a child in `pass_fds`."""
    global _pipe
    if _pipe is None or _pipe[2] != os.getpid():  # a forked child makes its own
        read_end, write_end = os.pipe()  # both close on exec: only `pass_fds` hands one on
        _pipe = (read_end, write_end, os.getpid())
    return _pipe[0]


def die_with_parent(fd: int | None = None, *, grace_s: float = GRACE_S) -> None:
    """End this process when the parent is gone: `fd` is the lifeline the parent passed (None:
    this `multiprocessing` child's own sentinel of its parent; nothing to do in a process that
    `multiprocessing` did not start)."""
    if fd is None:
        parent = multiprocessing.parent_process()
        if parent is None:
            return
        fd = parent.sentinel

    def watch() -> None:
        with contextlib.suppress(OSError):
            wait([fd])  # readable only at end-of-file: nobody writes to it
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(grace_s)
        os._exit(1)

    threading.Thread(target=watch, name="planfence-lifeline", daemon=True).start()
