"""The benchmarks' temporary folders: removed on the way out, and, when a benchmark was killed
before it could remove its own, by the next benchmark that starts.

Each folder holds a lock file its benchmark keeps locked (`flock`) while it runs. The kernel
releases the lock when the process ends, however it ends, so a folder whose lock can be taken
belongs to a benchmark that is gone: `sweep` removes it. Folders without the lock file (anyone
else's) are never touched.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

try:
    import fcntl
except ImportError:  # Windows: no locks, so no sweeping either
    fcntl = None  # type: ignore[assignment]

PREFIX = "planfence-bench-"
LOCK = ".planfence-bench.lock"


class Scratch:
    """One temporary folder, locked by this process until `remove()`."""

    def __init__(self, prefix: str = PREFIX, parent: Path | None = None) -> None:
        sweep(parent)
        self.path = Path(tempfile.mkdtemp(prefix=prefix, dir=parent))
        self._lock: int | None = None
        if fcntl is not None:
            # Locked under another name, then renamed: a sweeper never sees an unlocked lock file.
            pending = self.path / f"{LOCK}.new"
            self._lock = os.open(pending, os.O_CREAT | os.O_WRONLY, 0o600)
            fcntl.flock(self._lock, fcntl.LOCK_EX)
            os.rename(pending, self.path / LOCK)

    def remove(self) -> None:
        shutil.rmtree(self.path, ignore_errors=True)
        if self._lock is not None:
            os.close(self._lock)
            self._lock = None


@contextlib.contextmanager
def scratch_folder(prefix: str = PREFIX, parent: Path | None = None) -> Iterator[Path]:
    """A new temporary folder (in `parent`, default the system's), removed on the way out."""
    scratch = Scratch(prefix, parent)
    try:
        yield scratch.path
    finally:
        scratch.remove()


def sweep(parent: Path | None = None) -> list[Path]:
    """Remove the folders in `parent` (default the system's temporary folder) left by
    benchmarks that are gone; returns them."""
    if fcntl is None:
        return []
    folder = Path(parent) if parent is not None else Path(tempfile.gettempdir())
    removed = []
    try:
        entries = list(folder.iterdir())
    except OSError:
        return []
    for entry in entries:
        if not entry.name.startswith("planfence-") or not (entry / LOCK).is_file():
            continue
        try:
            fd = os.open(entry / LOCK, os.O_RDONLY)
        except OSError:
            continue
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:  # locked: its benchmark is running
            os.close(fd)
            continue
        try:
            shutil.rmtree(entry, ignore_errors=True)
            removed.append(entry)
        finally:
            os.close(fd)
    return removed
