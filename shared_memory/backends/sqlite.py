"""SQLite backend, the default: one file, WAL, safe for several processes on one machine.

All SQLite calls run on one dedicated thread per store, so the event loop never blocks on a busy
database. Writes take the write lock up front (`BEGIN IMMEDIATE`), which makes the check-and-write
of a batch atomic across processes.
"""

from __future__ import annotations

import asyncio
import json
import os
import random
import sqlite3
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from pathlib import Path
from typing import Any, TypeVar
from urllib.parse import quote

from ..base import (
    AsyncStore,
    Change,
    Decision,
    DecisionQuery,
    Flag,
    KeyState,
    PlanSnapshot,
    WriteBatch,
    decision_filter,
    decision_from_row,
    decision_row,
    plan_batch,
)
from ..errors import ConfigError, StoreNotFoundError, StoreUnavailableError
from ..lineage import frontier_sync
from ..records import DEFAULT_LIMITS, Record, StoreLimits, VerifiedRecords, utc_now
from ..urls import redact_url

T = TypeVar("T")

# Ordered; index + 1 is the schema version stored in PRAGMA user_version. Append, never edit.
MIGRATIONS: tuple[str, ...] = (
    """
    CREATE TABLE records (
        id TEXT PRIMARY KEY,
        key TEXT NOT NULL,
        kind TEXT NOT NULL,
        author TEXT NOT NULL,
        value TEXT NOT NULL,
        parents TEXT NOT NULL,
        supersedes TEXT,
        created_at TEXT NOT NULL
    );
    CREATE INDEX records_key ON records (key);
    CREATE INDEX records_supersedes ON records (supersedes) WHERE supersedes IS NOT NULL;
    CREATE TABLE edges (
        child TEXT NOT NULL,
        parent TEXT NOT NULL,
        PRIMARY KEY (child, parent)
    ) WITHOUT ROWID;
    CREATE TABLE keys (
        key TEXT PRIMARY KEY,
        owner TEXT NOT NULL,
        head TEXT,
        version INTEGER NOT NULL DEFAULT 0
    );
    CREATE TABLE changes (
        seq INTEGER PRIMARY KEY AUTOINCREMENT,
        key TEXT NOT NULL,
        kind TEXT NOT NULL,
        head TEXT,
        previous TEXT,
        owner TEXT NOT NULL,
        by TEXT NOT NULL,
        at TEXT NOT NULL
    );
    CREATE TABLE decisions (
        id INTEGER PRIMARY KEY AUTOINCREMENT,
        at TEXT NOT NULL,
        source TEXT NOT NULL,
        agent TEXT,
        tool TEXT,
        plan TEXT,
        verdict TEXT NOT NULL,
        reason TEXT NOT NULL,
        payload TEXT NOT NULL
    );
    CREATE INDEX decisions_tool ON decisions (tool);
    CREATE INDEX decisions_plan ON decisions (plan);
    """,
)

_RECORD_COLS = "id, key, value, parents, author, kind, supersedes, created_at"


_SYNC_MODES = ("OFF", "NORMAL", "FULL", "EXTRA")


def sqlite_options_from_url(url: str) -> dict[str, str]:
    """Options in the URL's query: `synchronous=normal|full` (default normal: durable across
    process crashes; full also across power loss, at the cost of an fsync per write), and
    `create=1|0` (whether a missing file may be created; see `create_async_store`)."""
    from urllib.parse import parse_qsl

    query = url.partition("?")[2]
    opts = dict(parse_qsl(query, keep_blank_values=True))
    unknown = set(opts) - {"synchronous", "create"}
    if unknown:
        raise ConfigError(
            f"unknown SQLite store option {sorted(unknown)[0]!r} in {redact_url(url)!r}"
        )
    if "synchronous" in opts and opts["synchronous"].upper() not in _SYNC_MODES:
        raise ConfigError(f"synchronous must be one of {', '.join(_SYNC_MODES).lower()}")
    return opts


def sqlite_path_from_url(url: str) -> str:
    """The file path in a SQLite URL, taken literally: `sqlite:///file:x.db` names a file called
    `file:x.db` (relative to the working directory), never an SQLite URI."""
    if not url.startswith("sqlite://"):
        raise ConfigError(f"not a sqlite URL: {redact_url(url)!r}")
    rest = url[len("sqlite://") :].partition("?")[0]
    if rest in ("", "/", "/:memory:"):
        return ":memory:"
    if not rest.startswith("/"):
        raise ConfigError(
            "sqlite URL must look like sqlite:///relative.db or sqlite:////abs.db: "
            f"{redact_url(url)!r}"
        )
    return rest[1:]


def _file_uri(path: str, mode: str) -> str:
    """An SQLite URI for an absolute path: every character with a meaning in URIs is escaped,
    so the path is read exactly as written."""
    return f"file://{quote(path, safe='/')}?mode={mode}"


def _is_busy(exc: sqlite3.OperationalError) -> bool:
    code = getattr(exc, "sqlite_errorcode", None)
    if isinstance(code, int):
        return code & 0xFF in (5, 6)  # SQLITE_BUSY, SQLITE_LOCKED (and their extended codes)
    text = str(exc)
    return "locked" in text or "busy" in text


def _until_not_busy(fn: Callable[[], T], timeout: float) -> T:
    """Run `fn` again while SQLite refuses with busy/locked, until `timeout` seconds have passed.

    The busy timeout does not cover every lock: switching a new file to WAL needs an exclusive
    lock that SQLite refuses at once (to avoid a deadlock) when another connection is making the
    same switch, so several processes opening one new store would fail after a few milliseconds.
    """
    deadline = time.monotonic() + timeout
    pause = 0.005
    while True:
        try:
            return fn()
        except sqlite3.OperationalError as exc:
            if not _is_busy(exc) or time.monotonic() + pause > deadline:
                raise
        time.sleep(pause * random.uniform(0.5, 1.5))  # jitter: racing openers fall out of step
        pause = min(pause * 2, 0.1)


class SQLiteStore(AsyncStore):
    def __init__(
        self,
        path: str | Path,
        *,
        limits: StoreLimits = DEFAULT_LIMITS,
        busy_timeout: float = 30.0,
        synchronous: str = "NORMAL",
        create: bool = True,
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
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="planfence-sqlite")
        self._conn: sqlite3.Connection | None = None
        self._ready = False
        self._verified = VerifiedRecords()
        self._closed = False

    # ---- plumbing

    def _connect(self) -> sqlite3.Connection:
        if self._conn is None:
            memory = self.path == ":memory:"
            if not memory and not self.create and not os.path.exists(self.path):
                raise StoreNotFoundError(self.path)
            try:
                if not memory and self.create:
                    Path(self.path).parent.mkdir(parents=True, exist_ok=True)
                self._conn = _until_not_busy(self._open, self.busy_timeout)
            except (sqlite3.Error, OSError) as exc:
                if not memory and not self.create and not os.path.exists(self.path):
                    raise StoreNotFoundError(self.path) from None  # removed meanwhile
                raise StoreUnavailableError(f"cannot open SQLite store {self.path}: {exc}") from exc
        return self._conn

    def _open(self) -> sqlite3.Connection:
        # Never hand the user's path to SQLite as is: a path starting with "file:" would be read
        # as an SQLite URI (":memory:", "..%2F", "?mode=" ...). A URI built from the absolute
        # path, with everything escaped, also lets `mode=rw` refuse to create a missing file.
        memory = self.path == ":memory:"
        target = ":memory:" if memory else _file_uri(self.path, "rwc" if self.create else "rw")
        conn = sqlite3.connect(
            target,
            timeout=self.busy_timeout,
            isolation_level=None,
            check_same_thread=False,
            uri=not memory,
        )
        try:
            conn.execute("PRAGMA journal_mode=WAL")
            conn.execute(f"PRAGMA synchronous={self.synchronous}")
            conn.execute(f"PRAGMA busy_timeout={int(self.busy_timeout * 1000)}")
        except BaseException:
            conn.close()
            raise
        return conn

    async def _run(self, fn: Callable[[sqlite3.Connection], T]) -> T:
        if not self._ready:
            await self.setup()
        return await self._call(fn)

    async def _call(self, fn: Callable[[sqlite3.Connection], T]) -> T:
        if self._closed:
            raise StoreUnavailableError(f"the SQLite store {self.path} is closed")

        def guarded() -> T:
            try:
                return fn(self._connect())
            except sqlite3.Error as exc:  # locked, disk full, corrupt: the store is unusable now
                raise StoreUnavailableError(f"SQLite store {self.path}: {exc}") from exc

        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._executor, guarded)

    @staticmethod
    def _in_tx(conn: sqlite3.Connection, fn: Callable[[sqlite3.Connection], T]) -> T:
        conn.execute("BEGIN IMMEDIATE")
        try:
            out = fn(conn)
            conn.execute("COMMIT")
        except BaseException:
            if conn.in_transaction:  # also after a failed COMMIT, so the lock is released
                conn.execute("ROLLBACK")
            raise
        return out

    async def setup(self) -> None:
        def migrate(conn: sqlite3.Connection) -> None:
            def step(c: sqlite3.Connection) -> None:
                version = c.execute("PRAGMA user_version").fetchone()[0]
                for i, script in enumerate(MIGRATIONS[version:], start=version + 1):
                    for stmt in script.split(";"):
                        if stmt.strip():
                            c.execute(stmt)
                    c.execute(f"PRAGMA user_version={i}")

            def migrate_once() -> None:
                if conn.execute("PRAGMA user_version").fetchone()[0] < len(MIGRATIONS):
                    self._in_tx(conn, step)

            _until_not_busy(migrate_once, self.busy_timeout)  # a failed try is rolled back

        await self._call(migrate)
        self._ready = True

    async def aclose(self) -> None:
        def close(conn: sqlite3.Connection) -> None:
            conn.close()

        if self._closed:
            return
        if self._conn is not None:
            await self._call(close)
            self._conn = None
        self._closed = True
        self._ready = False
        self._executor.shutdown(wait=False)

    # ---- primitives

    async def _apply(self, batch: WriteBatch) -> list[Change]:
        def write(conn: sqlite3.Connection) -> list[Change]:
            at = utc_now()
            keys = batch.keys()
            states = {
                r[0]: KeyState(r[0], r[1], r[2], r[3])
                for r in conn.execute(
                    "SELECT key, owner, head, version FROM keys "
                    "WHERE key IN (SELECT value FROM json_each(?))",
                    (json.dumps(keys),),
                )
            }
            wanted = batch.referenced_ids()
            found = dict(
                conn.execute(
                    "SELECT id, key FROM records WHERE id IN (SELECT value FROM json_each(?))",
                    (json.dumps(sorted(wanted)),),
                ).fetchall()
            )
            record_keys = {**found, **{r.id: r.key for r in batch.records}}
            planned = plan_batch(batch, states, set(found), record_keys, at)
            for rec in batch.records:
                cur = conn.execute(
                    f"INSERT OR IGNORE INTO records ({_RECORD_COLS}) VALUES (?,?,?,?,?,?,?,?)",
                    (
                        rec.id,
                        rec.key,
                        rec.value_json,
                        json.dumps(list(rec.parents)),
                        rec.author,
                        rec.kind,
                        rec.supersedes,
                        rec.created_at,
                    ),
                )
                if cur.rowcount:
                    conn.executemany(
                        "INSERT OR IGNORE INTO edges (child, parent) VALUES (?, ?)",
                        [(rec.id, p) for p in rec.parents],
                    )
            for state in planned.new_states.values():
                conn.execute(
                    "INSERT INTO keys (key, owner, head, version) VALUES (?,?,?,?) "
                    "ON CONFLICT (key) DO UPDATE SET owner=excluded.owner, head=excluded.head, "
                    "version=excluded.version",
                    (state.key, state.owner, state.head, state.version),
                )
            out = []
            for ch in planned.changes:
                cur = conn.execute(
                    "INSERT INTO changes (key, kind, head, previous, owner, by, at) "
                    "VALUES (?,?,?,?,?,?,?)",
                    (ch.key, ch.kind, ch.head, ch.previous, ch.owner, ch.by, ch.at),
                )
                out.append(Change(int(cur.lastrowid or 0), *_change_tail(ch)))
            for d in batch.decisions:
                self._insert_decision(conn, d if d.at else replace(d, at=at))
            return out

        return await self._run(lambda conn: self._in_tx(conn, write))

    @staticmethod
    def _insert_decision(conn: sqlite3.Connection, decision: Decision) -> int:
        cur = conn.execute(
            "INSERT INTO decisions (at, source, agent, tool, plan, verdict, reason, payload) "
            "VALUES (?,?,?,?,?,?,?,?)",
            decision_row(decision, utc_now()),
        )
        return int(cur.lastrowid or 0)

    async def _append_decision(self, decision: Decision) -> int:
        return await self._run(lambda conn: self._insert_decision(conn, decision))

    def _record(self, row: Sequence[Any]) -> Record:
        parents = tuple(json.loads(row[3]))
        return self._verified.load(row[0], row[1], row[2], parents, *row[4:8])

    def _read_records(self, conn: sqlite3.Connection, ids: Sequence[str]) -> dict[str, Record]:
        rows = conn.execute(
            f"SELECT {_RECORD_COLS} FROM records WHERE id IN (SELECT value FROM json_each(?))",
            (json.dumps(list(ids)),),
        ).fetchall()
        return {r[0]: self._record(r) for r in rows}

    @staticmethod
    def _read_keys(conn: sqlite3.Connection, keys: Sequence[str]) -> dict[str, KeyState]:
        rows = conn.execute(
            "SELECT key, owner, head, version FROM keys "
            "WHERE key IN (SELECT value FROM json_each(?))",
            (json.dumps(list(keys)),),
        ).fetchall()
        return {r[0]: KeyState(r[0], r[1], r[2], r[3]) for r in rows}

    async def _get_records(self, ids: Sequence[str]) -> dict[str, Record]:
        found = await self._run(lambda conn: self._read_records(conn, ids))
        # Callers of get/get_many may change `value`; the verified cache must not see that.
        return {i: replace(r, value=json.loads(r.value_json)) for i, r in found.items()}

    def _read_snapshot(
        self,
        conn: sqlite3.Connection,
        root_id: str,
        scope: list[str],
        max_records: int,
        flag: Flag | None,
    ) -> PlanSnapshot:
        pre = self._prefetch(conn, [root_id], scope, max_records)  # the root comes with it
        root = pre.get(root_id) or self._read_records(conn, [root_id]).get(root_id)
        if root is None:
            return PlanSnapshot(None)

        def lookup(ids: list[str]) -> dict[str, Record]:
            got = {i: pre[i] for i in ids if i in pre}
            rest = [i for i in ids if i not in pre]
            if rest:  # unknown ids, or a prefetch cut at the bound
                got.update(self._read_records(conn, rest))
            return got

        frontier = frontier_sync(lookup, [root_id], scope, max_records=max_records)
        # Records are immutable, so only the heads need to be current: they are read last.
        states = self._read_keys(conn, scope) if scope else {}
        flagged = False
        if root.supersedes and flag is not None:
            flagged = bool(self._read_decisions(conn, flag.query(root.supersedes)))
        return PlanSnapshot(root, frontier, states, flagged)

    async def _snapshot(
        self, root_id: str, scope: list[str], max_records: int, flag: Flag | None = None
    ) -> PlanSnapshot:
        return await self._run(
            lambda conn: self._read_snapshot(conn, root_id, scope, max_records, flag)
        )

    async def _snapshot_and_log(
        self,
        root_id: str,
        scope: list[str],
        max_records: int,
        decide: Callable[[PlanSnapshot], Decision | None],
        flag: Flag | None = None,
    ) -> tuple[PlanSnapshot, int | None]:
        # One hop to the database thread: read (no lock), decide, then a short write
        # transaction for the decision alone, so checks never hold the write lock for a walk.
        def run(conn: sqlite3.Connection) -> tuple[PlanSnapshot, int | None]:
            snap = self._read_snapshot(conn, root_id, scope, max_records, flag)
            decision = decide(snap)
            if decision is None:
                return snap, None
            return snap, self._in_tx(conn, lambda c: self._insert_decision(c, decision))

        return await self._run(run)

    async def _prefetch_lineage(
        self, roots: Sequence[str], scope: Sequence[str], limit: int
    ) -> dict[str, Record]:
        return await self._run(lambda conn: self._prefetch(conn, roots, scope, limit))

    def _prefetch(
        self, conn: sqlite3.Connection, roots: Sequence[str], scope: Sequence[str], limit: int
    ) -> dict[str, Record]:
        rows = conn.execute(
            f"""
            WITH RECURSIVE walk(id) AS (
                SELECT value FROM json_each(?1)
                UNION
                SELECT e.parent FROM walk w
                JOIN records r ON r.id = w.id
                JOIN edges e ON e.child = w.id
                WHERE r.key NOT IN (SELECT value FROM json_each(?2))
            )
            SELECT {_RECORD_COLS} FROM records WHERE id IN (SELECT id FROM walk LIMIT ?3)
            """,
            (json.dumps(list(roots)), json.dumps(list(scope)), limit + 1),
        ).fetchall()
        return {r[0]: self._record(r) for r in rows}

    async def _get_keys(self, keys: Sequence[str]) -> dict[str, KeyState]:
        return await self._run(lambda conn: self._read_keys(conn, keys))

    async def _list_keys(self, prefix: str) -> list[KeyState]:
        def read(conn: sqlite3.Connection) -> list[KeyState]:
            rows = conn.execute(
                "SELECT key, owner, head, version FROM keys WHERE substr(key, 1, ?) = ? "
                "ORDER BY key",
                (len(prefix), prefix),
            ).fetchall()
            return [KeyState(*r) for r in rows]

        return await self._run(read)

    async def _ids_with_prefix(self, prefix: str, limit: int) -> list[str]:
        def read(conn: sqlite3.Connection) -> list[str]:
            # Ids are lowercase hex, so [prefix, prefix + "g") holds exactly those starting with it.
            rows = conn.execute(
                "SELECT id FROM records WHERE id >= ? AND id < ? ORDER BY id LIMIT ?",
                (prefix, prefix + "g", limit),
            ).fetchall()
            return [str(r[0]) for r in rows]

        return await self._run(read)

    async def _changes(self, since: int, limit: int) -> list[Change]:
        def read(conn: sqlite3.Connection) -> list[Change]:
            rows = conn.execute(
                "SELECT seq, key, kind, head, previous, owner, by, at FROM changes "
                "WHERE seq > ? ORDER BY seq LIMIT ?",
                (since, limit),
            ).fetchall()
            return [Change(*r) for r in rows]

        return await self._run(read)

    @staticmethod
    def _read_decisions(conn: sqlite3.Connection, query: DecisionQuery) -> list[Decision]:
        where, args = decision_filter(query, "?")
        rows = conn.execute(
            "SELECT id, at, source, agent, tool, plan, verdict, reason, payload "
            f"FROM decisions {where} ORDER BY id DESC LIMIT ?",
            (*args, query.limit),
        ).fetchall()
        return [decision_from_row(r) for r in rows]

    async def _decisions(self, query: DecisionQuery) -> list[Decision]:
        return await self._run(lambda conn: self._read_decisions(conn, query))


def _change_tail(ch: Change) -> tuple[Any, ...]:
    return (ch.key, ch.kind, ch.head, ch.previous, ch.owner, ch.by, ch.at)
