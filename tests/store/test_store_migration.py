"""Stores written before the audit journal (schema 1, a `decisions` table with gate columns) open
as journals: every old row moves over, ids and all, in one transaction with the schema bump."""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from planfence.plugins.gate import Decision, find_decisions
from planfence.shared_memory import Entry, StoreUnavailableError, open_async_store
from planfence.shared_memory.backends import sqlite as sqlite_backend

# Rows as schema 1 stored them: (at, source, agent, tool, plan, verdict, reason, payload).
OLD_ROWS = [
    (
        "2026-01-01T00:00:00.000001Z",
        "gate",
        "exec",
        "ship",
        "p1",
        "replan",
        "stale_dependencies",
        '{"stale":[{"key":"order/7"}]}',
    ),
    ("2026-01-01T00:00:00.000002Z", "janus", "janus", None, None, "keep", "old_better", "{}"),
    ("2026-01-01T00:00:00.000003Z", "gate", None, "x", None, "block", "", "{}"),
]
OLD_INSERT = (
    "INSERT INTO {table} (at, source, agent, tool, plan, verdict, reason, payload) "
    "VALUES (?,?,?,?,?,?,?,?)"
)


def old_sqlite_store(path: Path) -> None:
    """A schema-1 SQLite file, written with schema 1's own SQL."""
    conn = sqlite3.connect(path)
    conn.executescript(sqlite_backend.MIGRATIONS[0])
    conn.executemany(OLD_INSERT.format(table="decisions"), OLD_ROWS)
    conn.execute("PRAGMA user_version=1")
    conn.commit()
    conn.close()


async def check_migrated(url: str, next_id: int = 4) -> None:
    store = await open_async_store(url, create=False)
    try:
        got = [Decision.from_entry(e) for e in await store.journal(before_id=4)]
        assert [(d.id, d.source, d.verdict, d.reason, d.agent, d.tool, d.plan) for d in got] == [
            (3, "gate", "block", "", None, "x", None),
            (2, "janus", "keep", "old_better", "janus", None, None),
            (1, "gate", "replan", "stale_dependencies", "exec", "ship", "p1"),
        ]
        assert got[-1].payload == {"stale": [{"key": "order/7"}]}
        assert got[-1].at == OLD_ROWS[0][0]
        # The labels are indexed as if written today: the gate's budget query finds the row.
        reasons = {"reason": ["x", "stale_dependencies"]}
        [hit] = await store.journal(kind="gate", subject="p1", labels=reasons)
        assert hit.id == 1
        assert [e.id for e in await find_decisions(store, source=None, tool="x") if e.id == 3] == [
            3
        ]
        assert [e.id for e in await find_decisions(store, source=None, agent="janus")] == [2]
        assert await store.log(Decision("gate", "allow", "current")) == next_id  # ids go on
    finally:
        await store.aclose()


async def test_a_schema_1_sqlite_store_migrates(tmp_path: Path) -> None:
    path = tmp_path / "old.db"
    old_sqlite_store(path)
    await check_migrated(f"sqlite:///{path}")
    conn = sqlite3.connect(path)
    tables = {r[0] for r in conn.execute("SELECT name FROM sqlite_master WHERE type='table'")}
    assert "decisions" not in tables and {"journal", "journal_labels"} <= tables
    assert conn.execute("PRAGMA user_version").fetchone()[0] == len(sqlite_backend.MIGRATIONS)
    conn.close()
    await check_migrated(f"sqlite:///{path}", next_id=5)  # opening again changes nothing


async def test_a_failed_migration_leaves_the_old_schema(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "old.db"
    old_sqlite_store(path)
    broken = (*sqlite_backend.MIGRATIONS, "SELECT no_such_column FROM journal")
    monkeypatch.setattr(sqlite_backend, "MIGRATIONS", broken)
    with pytest.raises(StoreUnavailableError):
        await open_async_store(f"sqlite:///{path}", create=False)
    conn = sqlite3.connect(path)
    assert conn.execute("PRAGMA user_version").fetchone()[0] == 1
    assert conn.execute("SELECT count(*) FROM decisions").fetchone()[0] == 3
    conn.close()


@contextmanager
def pg_store_at_schema(pg_url: str, version: int) -> Iterator[Any]:
    """A connection to a new PostgreSQL store schema built by the first `version` migrations,
    as a store of that version left it."""
    import psycopg

    from planfence.shared_memory.backends.postgres import MIGRATIONS, split_schema

    conninfo, schema = split_schema(pg_url)
    with psycopg.connect(conninfo, autocommit=True) as conn:
        conn.execute(f"CREATE SCHEMA {schema}")
        conn.execute(f"SET search_path = {schema}")
        for script in MIGRATIONS[:version]:
            conn.execute(script)  # type: ignore[arg-type]
        conn.execute("CREATE TABLE pf_schema (version INTEGER NOT NULL)")
        for n in range(1, version + 1):
            conn.execute("INSERT INTO pf_schema (version) VALUES (%s)", (n,))
        yield conn


async def test_a_schema_1_postgres_store_migrates(pg_url: str) -> None:
    import psycopg

    from planfence.shared_memory.backends.postgres import MIGRATIONS, split_schema

    conninfo, schema = split_schema(pg_url)
    with pg_store_at_schema(pg_url, 1) as conn, conn.cursor() as cur:
        rows: list[Any] = OLD_ROWS
        cur.executemany(OLD_INSERT.format(table="pf_decisions").replace("?", "%s"), rows)
    await check_migrated(pg_url)
    with psycopg.connect(conninfo, options=f"-c search_path={schema}") as conn:
        row = conn.execute("SELECT max(version) FROM pf_schema").fetchone()
        assert row is not None and row[0] == len(MIGRATIONS)
        gone = conn.execute("SELECT to_regclass('pf_decisions')").fetchone()
        assert gone is not None and gone[0] is None
    await check_migrated(pg_url, next_id=5)


# Schema 2 rows: key k went alice -> bob -> alice (two transfers), key j was never transferred.
SCHEMA_2_KEYS = [("order/1", "alice", "a" * 64, 1), ("order/2", "carol", None, 0)]
SCHEMA_2_CHANGES = [
    ("order/1", "owner", None, None, "alice", "alice", "2026-01-01T00:00:01Z"),
    ("order/2", "owner", None, None, "carol", "carol", "2026-01-01T00:00:02Z"),
    ("order/1", "head", "a" * 64, None, "alice", "alice", "2026-01-01T00:00:03Z"),
    ("order/1", "owner", "a" * 64, "a" * 64, "bob", "alice", "2026-01-01T00:00:04Z"),
    ("order/1", "owner", "a" * 64, "a" * 64, "alice", "bob", "2026-01-01T00:00:05Z"),
]
SCHEMA_2_KEY_INSERT = "INSERT INTO {table} (key, owner, head, version) VALUES (?,?,?,?)"
SCHEMA_2_CHANGE_INSERT = (
    "INSERT INTO {table} (key, kind, head, previous, owner, by, at) VALUES (?,?,?,?,?,?,?)"
)


async def check_epochs_migrated(url: str) -> None:
    store = await open_async_store(url, create=False)
    try:
        states = await store.states(["order/1", "order/2"])
        assert {k: (s.owner, s.epoch, s.head_sig) for k, s in states.items()} == {
            "order/1": ("alice", 3, None),
            "order/2": ("carol", 1, None),
        }
        assert [(c.key, c.epoch) for c in await store.changes()] == [
            ("order/1", 1),
            ("order/2", 1),
            ("order/1", 1),
            ("order/1", 2),
            ("order/1", 3),
        ]
        moved = await store.transfer("order/1", "bob", by="alice")  # epochs go on from there
        assert moved.epoch == 4 and await store.epoch("order/1") == 4
    finally:
        await store.aclose()


async def test_a_schema_2_sqlite_store_gets_owner_epochs(tmp_path: Path) -> None:
    path = tmp_path / "v2.db"
    conn = sqlite3.connect(path)
    for script in sqlite_backend.MIGRATIONS[:2]:
        conn.executescript(script)
    conn.executemany(SCHEMA_2_KEY_INSERT.format(table="keys"), SCHEMA_2_KEYS)
    conn.executemany(SCHEMA_2_CHANGE_INSERT.format(table="changes"), SCHEMA_2_CHANGES)
    conn.execute("PRAGMA user_version=2")
    conn.commit()
    conn.close()
    await check_epochs_migrated(f"sqlite:///{path}")
    conn = sqlite3.connect(path)
    assert conn.execute("PRAGMA user_version").fetchone()[0] == len(sqlite_backend.MIGRATIONS)
    conn.close()


async def test_a_schema_2_postgres_store_gets_owner_epochs(pg_url: str) -> None:
    import psycopg

    from planfence.shared_memory.backends.postgres import MIGRATIONS, split_schema

    conninfo, schema = split_schema(pg_url)
    with pg_store_at_schema(pg_url, 2) as conn, conn.cursor() as cur:
        keys: list[Any] = SCHEMA_2_KEYS
        changes: list[Any] = SCHEMA_2_CHANGES
        cur.executemany(SCHEMA_2_KEY_INSERT.format(table="pf_keys").replace("?", "%s"), keys)
        insert = SCHEMA_2_CHANGE_INSERT.format(table="pf_changes").replace("?", "%s")
        cur.executemany(insert, changes)
    await check_epochs_migrated(pg_url)
    with psycopg.connect(conninfo, options=f"-c search_path={schema}") as conn:
        row = conn.execute("SELECT max(version) FROM pf_schema").fetchone()
        assert row is not None and row[0] == len(MIGRATIONS)


# Schema 5 journal rows, verdict column and all: (at, kind, subject, verdict, labels, detail).
SCHEMA_5_ENTRIES = [
    (
        "2026-02-01T00:00:01Z",
        "gate",
        "p1",
        "allow",
        {"agent": "exec", "reason": "current", "tool": "book"},
        {"scope": ["order/7"]},
    ),
    ("2026-02-01T00:00:02Z", "janus", None, "keep", {"agent": "curator"}, {"key": "memo/1"}),
    ("2026-02-01T00:00:03Z", "race-plan", "p2", "-", {"key": "order/7"}, {}),
    ("2026-02-01T00:00:04Z", "effect", "order/7", "", {}, {"n": 1}),
]
SCHEMA_5_INSERT = (
    "INSERT INTO {table} (id, at, kind, subject, verdict, labels, detail) VALUES (?,?,?,?,?,?,?)"
)
SCHEMA_5_LABEL_INSERT = "INSERT INTO {table} (entry, name, value) VALUES (?,?,?)"


def schema_5_rows() -> tuple[list[tuple[Any, ...]], list[tuple[Any, ...]]]:
    """The journal rows and label-index rows a schema-5 store held for `SCHEMA_5_ENTRIES`."""
    rows, labels = [], []
    for n, (at, kind, subject, verdict, named, detail) in enumerate(SCHEMA_5_ENTRIES, start=1):
        text = json.dumps(named, sort_keys=True, separators=(",", ":"))
        rows.append((n, at, kind, subject, verdict, text, json.dumps(detail)))
        labels.extend((n, name, value) for name, value in named.items())
    return rows, labels


def expected_entries() -> list[Entry]:
    """`SCHEMA_5_ENTRIES` as the journal holds them now, newest first: the verdict a label."""
    out = []
    for n, (at, kind, subject, verdict, named, detail) in enumerate(SCHEMA_5_ENTRIES, start=1):
        labels = {**named, "verdict": verdict} if verdict else named
        out.append(Entry(kind, subject=subject, labels=labels, detail=detail, at=at, id=n))
    return out[::-1]


async def check_verdicts_migrated(url: str, next_id: int) -> None:
    store = await open_async_store(url, create=False)
    try:
        assert await store.journal(before_id=5) == expected_entries()
        # The label index holds the verdicts: queries by label find the old rows.
        found = await store.journal(labels={"verdict": "allow"})
        assert [e.id for e in found] == [1]
        found = await store.journal(labels={"verdict": ("keep", "-")})
        assert [e.id for e in found] == [3, 2]
        found = await store.journal(kind="gate", labels={"verdict": "allow", "tool": "book"})
        assert [e.id for e in found] == [1]
        assert await store.journal(labels={"verdict": ""}) == []  # no verdict: no label
        [keep] = await find_decisions(store, source="janus", verdict="keep")
        assert (keep.id, keep.verdict, keep.agent) == (2, "keep", "curator")
        assert await store.log(Entry("effect", subject="order/7")) == next_id  # ids go on
    finally:
        await store.aclose()


def sqlite_store_at_schema(path: Path, version: int) -> sqlite3.Connection:
    """A SQLite file built by the first `version` migrations, as a store of that version left it."""
    conn = sqlite3.connect(path)
    for script in sqlite_backend.MIGRATIONS[:version]:
        conn.executescript(script)
    conn.execute(f"PRAGMA user_version={version}")
    return conn


async def test_a_schema_5_sqlite_store_files_its_verdicts_as_labels(tmp_path: Path) -> None:
    path = tmp_path / "v5.db"
    conn = sqlite_store_at_schema(path, 5)
    rows, labels = schema_5_rows()
    conn.executemany(SCHEMA_5_INSERT.format(table="journal"), rows)
    conn.executemany(SCHEMA_5_LABEL_INSERT.format(table="journal_labels"), labels)
    conn.commit()
    conn.close()
    await check_verdicts_migrated(f"sqlite:///{path}", next_id=5)

    def schema() -> tuple[int, list[str], int]:
        conn = sqlite3.connect(path)
        try:
            version = conn.execute("PRAGMA user_version").fetchone()[0]
            columns = [r[1] for r in conn.execute("PRAGMA table_info(journal)")]
            index = conn.execute(
                "SELECT count(*) FROM journal_labels WHERE name = 'verdict'"
            ).fetchone()[0]
            return version, columns, index
        finally:
            conn.close()

    migrated = schema()
    assert migrated == (
        len(sqlite_backend.MIGRATIONS),
        ["id", "at", "kind", "subject", "labels", "detail"],
        3,
    )
    await check_verdicts_migrated(f"sqlite:///{path}", next_id=6)  # opening again: no change
    assert schema() == migrated


@pytest.mark.postgres
async def test_a_schema_5_postgres_store_files_its_verdicts_as_labels(pg_url: str) -> None:
    import psycopg

    from planfence.shared_memory.backends.postgres import MIGRATIONS, split_schema

    conninfo, schema = split_schema(pg_url)
    with pg_store_at_schema(pg_url, 5) as conn, conn.cursor() as cur:
        rows, labels = schema_5_rows()
        cur.executemany(SCHEMA_5_INSERT.format(table="pf_journal").replace("?", "%s"), rows)
        insert = SCHEMA_5_LABEL_INSERT.format(table="pf_journal_labels").replace("?", "%s")
        cur.executemany(insert, labels)
        # Rows written with their ids, as the old store's sequence had handed them out.
        cur.execute("SELECT setval(pg_get_serial_sequence('pf_journal', 'id'), 4)")
    await check_verdicts_migrated(pg_url, next_id=5)

    def described() -> tuple[int, list[str], int]:
        with psycopg.connect(conninfo, options=f"-c search_path={schema}") as conn:
            row = conn.execute("SELECT max(version) FROM pf_schema").fetchone()
            columns = conn.execute(
                "SELECT column_name FROM information_schema.columns "
                "WHERE table_schema = %s AND table_name = 'pf_journal' ORDER BY ordinal_position",
                (schema,),
            ).fetchall()
            index = conn.execute(
                "SELECT count(*) FROM pf_journal_labels WHERE name = 'verdict'"
            ).fetchone()
            assert row is not None and index is not None
            return row[0], [c[0] for c in columns], index[0]

    migrated = described()
    assert migrated == (len(MIGRATIONS), ["id", "at", "kind", "subject", "labels", "detail"], 3)
    await check_verdicts_migrated(pg_url, next_id=6)  # opening again: no change
    assert described() == migrated


async def test_a_sqlite_store_of_a_newer_planfence_is_refused(tmp_path: Path) -> None:
    """A schema this planfence does not know is never opened as if it were its own (the newer
    version may have moved what this one reads), nor touched."""
    path = tmp_path / "newer.db"
    newer = len(sqlite_backend.MIGRATIONS) + 1
    conn = sqlite_store_at_schema(path, len(sqlite_backend.MIGRATIONS))
    conn.execute(f"PRAGMA user_version={newer}")
    conn.commit()
    conn.close()
    with pytest.raises(StoreUnavailableError) as refused:
        await open_async_store(f"sqlite:///{path}", create=False)
    assert str(refused.value) == (
        f"the SQLite store {path} has schema version {newer}, newer than this planfence's "
        f"{len(sqlite_backend.MIGRATIONS)}: upgrade planfence to open it"
    )
    conn = sqlite3.connect(path)
    assert conn.execute("PRAGMA user_version").fetchone()[0] == newer
    conn.close()


@pytest.mark.postgres
async def test_a_postgres_store_of_a_newer_planfence_is_refused(pg_url: str) -> None:
    import psycopg

    from planfence.shared_memory.backends.postgres import MIGRATIONS, split_schema

    conninfo, schema = split_schema(pg_url)
    newer = len(MIGRATIONS) + 1
    with pg_store_at_schema(pg_url, len(MIGRATIONS)) as conn:
        conn.execute("INSERT INTO pf_schema (version) VALUES (%s)", (newer,))
    with pytest.raises(StoreUnavailableError, match=f"has schema version {newer}, newer than"):
        await open_async_store(pg_url, create=False)
    with psycopg.connect(conninfo, options=f"-c search_path={schema}") as conn:
        row = conn.execute("SELECT max(version) FROM pf_schema").fetchone()
        assert row is not None and row[0] == newer
