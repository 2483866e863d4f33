"""Opening a PostgreSQL store: refuse one that does not exist, read its schema version, and migrate
only when it is behind, under a lock of that schema alone, waited for a bounded time.

An open that finds its schema up to date takes no lock and runs no DDL, so a process that stalls
while migrating (a blocked event loop, a debugger) holds back only the opens of the same schema
that need migrating too; those give up after `migration_timeout` seconds (`?migration_timeout=` on
the URL) with one line naming the session that holds the lock.
"""

from __future__ import annotations

import contextlib
import hashlib
from typing import Any

from ..errors import StoreNotFoundError, StoreUnavailableError
from ..extras import extra_imports
from .postgres_schema import MIGRATIONS
from .sql import newer_schema

with extra_imports("postgres", "the PostgreSQL store"):
    import psycopg

DEFAULT_MIGRATION_TIMEOUT = 5.0
"""Seconds an open waits for another session's migration of the same schema."""

_HOLDER_SQL = """
    SELECT a.pid, a.application_name FROM pg_locks l JOIN pg_stat_activity a ON a.pid = l.pid
    WHERE l.locktype = 'advisory' AND l.granted AND l.objsubid = 1
        AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database())
        AND l.classid = %s::text::oid AND l.objid = %s::text::oid
    LIMIT 1
"""


def migration_lock_id(schema: str) -> int:
    """The advisory lock a migration of `schema` holds (a signed 64-bit key): one per schema,
    the same in every process and planfence version that shares the schema."""
    digest = hashlib.sha256(f"planfence-migrate:{schema}".encode()).digest()
    return int.from_bytes(digest[:8], "big", signed=True)


async def require_store(conn: psycopg.AsyncConnection[Any], url: str, schema: str | None) -> None:
    """Without `create`: refuse a schema that is missing or holds no planfence tables (a
    mistyped schema, or a database never set up), as a missing SQLite file is refused."""
    if schema:
        cur = await conn.execute("SELECT 1 FROM pg_namespace WHERE nspname = %s", (schema,))
        if await cur.fetchone() is None:
            raise StoreNotFoundError(
                url, detail=f"schema {schema} does not exist", check="the schema name"
            )
    cur = await conn.execute("SELECT current_schema(), to_regclass('pf_schema') IS NOT NULL")
    row = await cur.fetchone()
    found, ready = (row[0], bool(row[1])) if row else (None, False)
    if not ready:
        where = f"schema {found}" if found else "the search path (no schema on it exists)"
        raise StoreNotFoundError(
            url,
            detail=f"{where} holds no planfence tables",
            check="the URL and its schema= option",
        )


async def schema_version(conn: psycopg.AsyncConnection[Any]) -> tuple[str | None, int]:
    """The schema the tables live in (None: none on the search path exists) and their version
    (0: no planfence tables there yet)."""
    cur = await conn.execute("SELECT current_schema(), to_regclass('pf_schema') IS NOT NULL")
    row = await cur.fetchone()
    schema, exists = (row[0], bool(row[1])) if row else (None, False)
    if not exists:
        return schema, 0
    row = await (await conn.execute("SELECT max(version) FROM pf_schema")).fetchone()
    return schema, int(row[0] or 0) if row else 0


async def migrate(
    conn: psycopg.AsyncConnection[Any], *, schema: str | None, timeout: float, where: str
) -> str:
    """Bring the store's tables to the latest version; return the schema they live in.

    Raises:
        StoreUnavailableError: another session holds the schema's migration lock for longer
            than `timeout` seconds (the message names its pid and application_name).
    """
    found, version = await schema_version(conn)
    name = schema or found or "public"
    if version > len(MIGRATIONS):
        raise newer_schema(
            f"the PostgreSQL store at {where} (schema {name})", version, len(MIGRATIONS)
        )
    if version == len(MIGRATIONS):
        return name  # up to date: no lock, no DDL
    if schema:
        # Another process may create it at the same moment.
        with contextlib.suppress(psycopg.errors.UniqueViolation):
            await conn.execute(f"CREATE SCHEMA IF NOT EXISTS {schema}")
    lock = migration_lock_id(name)
    try:
        async with conn.transaction():
            await conn.execute(
                "SELECT set_config('lock_timeout', %s, true)", (f"{max(1, round(timeout * 1000))}",)
            )
            await conn.execute("SELECT pg_advisory_xact_lock(%s)", (lock,))
            # Only the wait for the lock is bounded: the migration's own DDL waits as it would.
            await conn.execute("SET LOCAL lock_timeout TO DEFAULT")
            await conn.execute("CREATE TABLE IF NOT EXISTS pf_schema (version INTEGER NOT NULL)")
            row = await (await conn.execute("SELECT max(version) FROM pf_schema")).fetchone()
            version = (row[0] if row else None) or 0  # again, under the lock
            if version > len(MIGRATIONS):  # a newer planfence migrated it meanwhile
                raise newer_schema(
                    f"the PostgreSQL store at {where} (schema {name})", version, len(MIGRATIONS)
                )
            for i, script in enumerate(MIGRATIONS[version:], start=version + 1):
                await conn.execute(script)
                await conn.execute("INSERT INTO pf_schema (version) VALUES (%s)", (i,))
            row = await (await conn.execute("SELECT current_schema()")).fetchone()
    except psycopg.errors.LockNotAvailable:
        raise StoreUnavailableError(
            await _held(conn, lock, f"at {where} (schema {name})", timeout)
        ) from None
    return str(row[0]) if row and row[0] else name


async def _held(conn: psycopg.AsyncConnection[Any], lock: int, store: str, timeout: float) -> str:
    """The one line saying who holds the migration lock of the store."""
    cur = await conn.execute(_HOLDER_SQL, (str((lock >> 32) & 0xFFFFFFFF), str(lock & 0xFFFFFFFF)))
    row = await cur.fetchone()
    head = (
        f"cannot open the PostgreSQL store {store}: another session is migrating it and has "
        f"held its migration lock for over {timeout:g} s"
    )
    wait = "or wait longer with ?migration_timeout=SECONDS on the URL"
    if row is None:
        return f"{head}, and let go just now: open it again ({wait})"
    pid, app = row[0], row[1] or ""
    return (
        f"{head}: pid {pid}, application_name {app!r} (a stalled process? end it with "
        f"SELECT pg_terminate_backend({pid}), {wait})"
    )
