"""SQLite backend, the default: one file, WAL, safe for several processes on one machine.

SQLite calls run on one dedicated thread per store, so the event loop never blocks on a busy
database; with `io="loop"` (URL option `io=loop`) they run on the event loop and go to the
thread only to wait for a lock (see `sqlite_runner`). Writes take the write lock up front
(`BEGIN IMMEDIATE`), which makes the check-and-write of a batch atomic across processes.
"""

from __future__ import annotations

import json
import os
import sqlite3
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any, TypeVar

from ..batches import WriteBatch, WriteResult, plan_batch
from ..core import Decide
from ..errors import ConfigError, StoreNotFoundError, StoreUnavailableError
from ..lease_writes import needs_leases
from ..model import KeyState
from ..reads import (
    Lineage,
    ReadFlow,
    ReadOp,
    drive,
    record_and_keys,
)
from ..records import DEFAULT_LIMITS, StoreLimits, utc_now
from ..store import AsyncStore
from .sql import (
    KEY_COLS,
    RECORD_COLS,
    TAMPERABLE,
    change_row,
    entry_row,
    insert_change_sql,
    key_row,
    label_rows,
    newer_schema,
    record_row,
    upsert_key_sql,
)
from .sqlite_files import (
    _SYNC_MODES,
    _file_uri,
    _until_not_busy,
    sqlite_options_from_url,
    sqlite_path_from_url,
)
from .sqlite_leases import _apply_leases, _lease_rows
from .sqlite_reads import FEW_KEYS, answer_one, read_record_and_keys
from .sqlite_runner import Busy, SQLiteRunner
from .sqlite_schema import MIGRATIONS

T = TypeVar("T")
_UPSERT_KEY = upsert_key_sql("keys", "?")
_INSERT_CHANGE = insert_change_sql("changes", "?")
__all__ = ["MIGRATIONS", "SQLiteStore", "sqlite_options_from_url", "sqlite_path_from_url"]


class SQLiteStore(AsyncStore):
    optional_reads = frozenset({Lineage})
    supports_leases = True
    shared_writers = True

    def __init__(
        self,
        path: str | Path,
        *,
        limits: StoreLimits = DEFAULT_LIMITS,
        busy_timeout: float = 30.0,
        synchronous: str = "NORMAL",
        create: bool = True,
        io: str = "thread",
    ) -> None:
        super().__init__(limits=limits)
        # Resolved once, so the store does not move when the working directory changes.
        self.path = ":memory:" if str(path) == ":memory:" else os.path.abspath(path)
        self.url = f"sqlite:///{self.path}"
        self.create = create
        self.busy_timeout = busy_timeout
        if synchronous.upper() not in _SYNC_MODES:
            raise ConfigError(f"synchronous must be one of {', '.join(_SYNC_MODES).lower()}")
        self.synchronous = synchronous.upper()
        self.poll_interval = 0.02
        self._runner = SQLiteRunner(io, busy_timeout)
        self._conn: sqlite3.Connection | None = None
        self._ready = False

    # ---- plumbing

    def _connect(self) -> sqlite3.Connection:
        if self._conn is None:
            memory = self.path == ":memory:"
            if not memory and not self.create and not os.path.exists(self.path):
                raise StoreNotFoundError(self.path)
            try:
                if not memory and self.create:
                    Path(self.path).parent.mkdir(parents=True, exist_ok=True)
                self._conn = _until_not_busy(self._open_file, self.busy_timeout)
            except (sqlite3.Error, OSError) as exc:
                if not memory and not self.create and not os.path.exists(self.path):
                    raise StoreNotFoundError(self.path) from None  # removed meanwhile
                raise StoreUnavailableError(f"cannot open SQLite store {self.path}: {exc}") from exc
        return self._conn

    def _open_file(self) -> sqlite3.Connection:
        # Never hand the user's path to SQLite as is: a path starting with "file:" would be read
        # as an SQLite URI (":memory:", "..%2F", "?mode=" ...). A URI built from the absolute
        # path, with everything escaped, also lets `mode=rw` refuse to create a missing file.
        memory = self.path == ":memory:"
        target = ":memory:" if memory else _file_uri(self.path, "rwc" if self.create else "rw")
        conn = sqlite3.connect(
            target,
            timeout=self._runner.connection_timeout,
            isolation_level=None,
            check_same_thread=False,
            uri=not memory,
        )
        try:
            conn.execute("PRAGMA journal_mode=WAL")
            conn.execute(f"PRAGMA synchronous={self.synchronous}")
            conn.execute(f"PRAGMA busy_timeout={int(self._runner.connection_timeout * 1000)}")
        except BaseException:
            conn.close()
            raise
        return conn

    async def _run(
        self, fn: Callable[[sqlite3.Connection], T], *, may_run_on_loop: bool = True
    ) -> T:
        if not self._ready:
            await self.setup()
        return await self._call(fn, may_run_on_loop=may_run_on_loop)

    async def _call(
        self, fn: Callable[[sqlite3.Connection], T], *, may_run_on_loop: bool = True
    ) -> T:
        self._check_open()  # also for a call that started before the store closed

        def guarded() -> T:
            self._check_open()  # queued here before the store closed: never reconnect
            try:
                return fn(self._connect())
            except sqlite3.Error as exc:  # locked, disk full, corrupt: the store is unusable now
                raise StoreUnavailableError(f"SQLite store {self.path}: {exc}") from exc

        # On the loop only once the schema is in place: opening and migrating may wait.
        return await self._runner.call(guarded, may_run_on_loop=may_run_on_loop and self._ready)

    def _in_tx(self, conn: sqlite3.Connection, fn: Callable[[sqlite3.Connection], T]) -> T:
        self._runner.begin_write(conn)
        try:
            out = fn(conn)
            conn.execute("COMMIT")
        except BaseException:
            if conn.in_transaction:  # also after a failed COMMIT, so the lock is released
                conn.execute("ROLLBACK")
            raise
        return out

    async def _open(self) -> None:
        def migrate(conn: sqlite3.Connection) -> None:
            def step(c: sqlite3.Connection) -> None:
                version = c.execute("PRAGMA user_version").fetchone()[0]
                for i, script in enumerate(MIGRATIONS[version:], start=version + 1):
                    for stmt in script.split(";"):
                        if stmt.strip():
                            c.execute(stmt)
                    c.execute(f"PRAGMA user_version={i}")

            def migrate_once() -> None:
                version = conn.execute("PRAGMA user_version").fetchone()[0]
                if version > len(MIGRATIONS):
                    raise newer_schema(f"the SQLite store {self.path}", version, len(MIGRATIONS))
                if version < len(MIGRATIONS):
                    self._in_tx(conn, step)

            _until_not_busy(migrate_once, self.busy_timeout)  # a failed try is rolled back

        await self._call(migrate)
        self._ready = True

    async def _close(self) -> None:
        conn, self._conn = self._conn, None
        self._ready = False
        if conn is not None:
            # On the store's thread, after the calls queued there (they find the store closed).
            await self._runner.call(conn.close, may_run_on_loop=False)
        self._runner.shutdown()

    # ---- primitives

    async def _read(self, ops: Sequence[ReadOp]) -> list[Any]:
        def read(conn: sqlite3.Connection) -> list[Any]:
            if len(ops) == 1:  # one statement is a snapshot by itself
                return self._answer_ops(conn, ops)
            pair = record_and_keys(ops)
            if pair is not None and len(pair[1]) <= FEW_KEYS:
                return read_record_and_keys(conn, *pair)
            return self._snapshot_reads(conn, lambda: self._answer_ops(conn, ops))

        # A lineage walk may read thousands of rows: never on the loop.
        walks = any(isinstance(op, Lineage) for op in ops)
        return await self._run(read, may_run_on_loop=not walks)

    async def _write(self, batch: WriteBatch) -> WriteResult:
        return await self._run(lambda conn: self._written(conn, batch))

    def _written(self, conn: sqlite3.Connection, batch: WriteBatch) -> WriteResult:
        """`batch`, checked and written in its own write transaction."""
        return self._in_tx(conn, lambda c: self._write_tx(c, batch))

    async def _transact(
        self, flow: ReadFlow[T], decide: Decide[T] | None, short: bool = False
    ) -> tuple[T, WriteResult | None]:
        # One call: one hop to the database thread, or none on the loop for a short flow (a
        # flow that may walk a lineage stays off the loop). A short flow with a decision runs
        # in the write transaction itself (the lock held for a row or two); otherwise the reads
        # run in a read transaction (no lock), then the decision, then a short write
        # transaction, so a long walk never holds the write lock.
        def answer(conn: sqlite3.Connection) -> Callable[[Sequence[ReadOp]], list[Any]]:
            return lambda ops: self._answer_sync(ops, lambda asked: self._answer_ops(conn, asked))

        def in_one(conn: sqlite3.Connection) -> tuple[T, WriteResult | None]:
            def body(c: sqlite3.Connection) -> tuple[T, WriteResult | None]:
                result = drive(flow, answer(c))
                batch = decide(result) if decide is not None else None
                return result, (self._write_tx(c, batch) if batch is not None else None)

            return self._in_tx(conn, body)  # `Busy` at BEGIN: nothing read yet, so it reruns

        def in_two(conn: sqlite3.Connection) -> tuple[T, WriteResult | WriteBatch | None]:
            result = self._snapshot_reads(conn, lambda: drive(flow, answer(conn)))
            batch = decide(result) if decide is not None else None
            if batch is None:
                return result, None
            try:
                return result, self._written(conn, batch)
            except Busy:  # on the loop, with the lock taken: the write waits on the thread
                return result, batch

        if short and decide is not None:
            return await self._run(in_one)
        result, written = await self._run(in_two, may_run_on_loop=short)
        if isinstance(written, WriteBatch):  # decided already: only the write runs again
            batch = written
            written = await self._call(
                lambda conn: self._written(conn, batch), may_run_on_loop=False
            )
        return result, written

    @staticmethod
    def _snapshot_reads(conn: sqlite3.Connection, fn: Callable[[], T]) -> T:
        conn.execute("BEGIN")  # deferred: a read transaction, one snapshot for every read in it
        try:
            out = fn()
        except BaseException:
            if conn.in_transaction:
                conn.execute("ROLLBACK")
            raise
        conn.execute("COMMIT")
        return out

    def _answer_ops(self, conn: sqlite3.Connection, ops: Sequence[ReadOp]) -> list[Any]:
        return [answer_one(conn, op) for op in ops]

    @staticmethod
    def _write_tx(conn: sqlite3.Connection, batch: WriteBatch) -> WriteResult:
        at = utc_now()
        if batch.journal_only:  # an audit record: no key, record or lease to check
            return SQLiteStore._append_entries(conn, batch, at, WriteResult())
        keys, refs = batch.keys(), sorted(batch.referenced_ids())
        states = (
            {
                r[0]: KeyState(*r)
                for r in conn.execute(
                    f"SELECT {KEY_COLS} FROM keys WHERE key IN (SELECT value FROM json_each(?))",
                    (json.dumps(keys),),
                )
            }
            if keys
            else {}
        )
        found = (
            dict(
                conn.execute(
                    "SELECT id, key FROM records WHERE id IN (SELECT value FROM json_each(?))",
                    (json.dumps(refs),),
                ).fetchall()
            )
            if refs
            else {}
        )
        record_keys = {**found, **{r.id: r.key for r in batch.records}}
        leased, now = needs_leases(batch), time.time()
        rows = _lease_rows(conn, keys) if leased else []
        planned = plan_batch(batch, states, set(found), record_keys, at, lease_rows=rows, now=now)
        if leased:
            _apply_leases(conn, keys, planned.leases, now)
        for rec in batch.records:
            cur = conn.execute(
                f"INSERT OR IGNORE INTO records ({RECORD_COLS}) VALUES (?,?,?,?,?,?,?,?)",
                record_row(rec, json.dumps(list(rec.parents))),
            )
            if cur.rowcount:
                conn.executemany(
                    "INSERT OR IGNORE INTO edges (child, parent) VALUES (?, ?)",
                    [(rec.id, p) for p in rec.parents],
                )
        for state in planned.new_states.values():
            conn.execute(_UPSERT_KEY, key_row(state))
        result = WriteResult()
        for ch in planned.changes:
            cur = conn.execute(_INSERT_CHANGE, change_row(ch))
            result.changes.append(replace(ch, seq=int(cur.lastrowid or 0)))
        return SQLiteStore._append_entries(conn, batch, at, result)

    @staticmethod
    def _append_entries(
        conn: sqlite3.Connection, batch: WriteBatch, at: str, result: WriteResult
    ) -> WriteResult:
        for entry in batch.entries:
            cur = conn.execute(
                "INSERT INTO journal (at, kind, subject, labels, detail) VALUES (?,?,?,?,?)",
                entry_row(entry, at),
            )
            entry_id = int(cur.lastrowid or 0)
            conn.executemany(
                "INSERT INTO journal_labels (entry, name, value) VALUES (?,?,?)",
                label_rows(entry_id, entry),
            )
            result.entry_ids.append(entry_id)
        return result

    async def _tamper_record(self, record_id: str, fields: Mapping[str, Any] | None) -> None:
        """For integrity tests: change stored fields of a record (None: delete its row)."""

        def tamper(conn: sqlite3.Connection) -> None:
            if fields is None:
                conn.execute("DELETE FROM records WHERE id = ?", (record_id,))
                return
            for name, value in fields.items():
                stored = json.dumps(list(value)) if name == "parents" else value
                conn.execute(
                    f"UPDATE records SET {TAMPERABLE[name]} = ? WHERE id = ?", (stored, record_id)
                )

        await self._run(lambda conn: self._in_tx(conn, tamper))  # waits for the lock

    async def _tamper_head(self, state: KeyState) -> None:
        """For trust tests: overwrite a key's row (owner, head, sequence, epoch, signature)."""

        def tamper(conn: sqlite3.Connection) -> None:
            conn.execute(_UPSERT_KEY, key_row(state))

        await self._run(lambda conn: self._in_tx(conn, tamper))  # waits for the lock
