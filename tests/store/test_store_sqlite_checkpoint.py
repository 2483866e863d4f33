"""SQLite checkpoints run on the store's own checkpoint thread, not inside a write: the log stays
short under a steady stream of small writes, and closing the store stops the thread."""

from __future__ import annotations

import os
import sqlite3
import threading
from pathlib import Path

from planfence.shared_memory import create_async_store
from planfence.shared_memory.backends.sqlite_checkpoint import AUTOCHECKPOINT_PAGES, WAL_SIZE_LIMIT


def checkpoint_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == "planfence-sqlite-checkpoint"]


async def test_the_log_is_checkpointed_off_the_write_path(tmp_path: Path) -> None:
    before = len(checkpoint_threads())
    path = tmp_path / "s.db"
    store = create_async_store(f"sqlite:///{path}")
    await store.own("k", "a")
    assert len(checkpoint_threads()) == before + 1
    page = sqlite3.connect(path).execute("PRAGMA page_size").fetchone()[0]
    wal = Path(f"{path}-wal")
    largest = 0
    for i in range(1500):
        await store.put("k", {"i": i}, author="a")
        largest = max(largest, os.path.getsize(wal))  # noqa: ASYNC240
    # 1,500 commits of several pages each write some 10,000 pages to the log, under the
    # backstop (SQLite would checkpoint at 1,000): only the checkpoint thread keeps the log from
    # holding them all, by letting it start over.
    assert AUTOCHECKPOINT_PAGES * page > 10 * WAL_SIZE_LIMIT
    assert largest < 4 * WAL_SIZE_LIMIT
    # What the checkpoints copied is in the database file: a reader without the log sees it.
    await store.aclose()
    assert not checkpoint_threads()[before:]
    conn = sqlite3.connect(path)
    assert conn.execute("SELECT version FROM keys WHERE key = 'k'").fetchone() == (1500,)
    conn.close()
    assert not wal.exists()  # noqa: ASYNC240 (the last connection to close removes the log)
