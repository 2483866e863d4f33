"""The PostgreSQL migration lock: an open reads the schema version first and locks only to
migrate, the lock is the schema's own, and the wait for it is bounded, ending in one line that
names the session holding it.

The holder is a real planfence migration that stalls: the schema gets one more migration step,
which sleeps in the server for the stalled schema only, so the opening store takes whatever lock
the store's own code takes and holds it."""

from __future__ import annotations

import asyncio
import contextlib
import sys
import uuid
from collections.abc import AsyncIterator, Iterator
from typing import Any

import pytest

from planfence.shared_memory import (
    ConfigError,
    StoreUnavailableError,
    create_async_store,
    open_async_store,
)
from planfence.shared_memory.backends import postgres_schema
from planfence.shared_memory.backends.postgres import PostgresStore, split_schema

pytestmark = pytest.mark.postgres

HANG_GUARD_S = 30  # an open that waits on a lock it should not take would wait forever


def _sql(url: str, statement: str, *args: Any) -> list[tuple[Any, ...]]:
    import psycopg

    conninfo, _ = split_schema(url)
    with psycopg.connect(conninfo, autocommit=True) as conn:
        cur = conn.execute(statement, args)
        return cur.fetchall() if cur.description else []


@pytest.fixture
def schemas(pg_url: str) -> Iterator[tuple[str, str]]:
    """A base URL without a schema, and a prefix for this test's schemas (dropped afterwards)."""
    base = pg_url.rpartition("?schema=")[0]
    prefix = f"pf_lock_{uuid.uuid4().hex[:8]}"
    yield base, prefix
    for (name,) in _sql(
        base, "SELECT nspname FROM pg_namespace WHERE nspname LIKE %s", prefix + "%"
    ):
        _sql(base, f"DROP SCHEMA IF EXISTS {name} CASCADE")


@pytest.fixture
def one_more_step(monkeypatch: pytest.MonkeyPatch) -> None:
    """Add a migration step that sleeps in the server when the session's application_name
    starts with `stalled-` (other sessions pass it at once); patched wherever the store reads
    the migrations."""
    step = (
        "SELECT pg_sleep(CASE WHEN current_setting('application_name') LIKE 'stalled-%' "
        f"THEN {HANG_GUARD_S * 2} ELSE 0 END)"
    )
    shipped = postgres_schema.MIGRATIONS
    longer = (*shipped, step)
    for name, module in list(sys.modules.items()):
        if name.startswith("planfence.shared_memory.backends.") and (
            getattr(module, "MIGRATIONS", None) is shipped
        ):
            monkeypatch.setattr(module, "MIGRATIONS", longer)


@contextlib.asynccontextmanager
async def stalled_migration(base: str, schema: str) -> AsyncIterator[str]:
    """`schema`, whose migration has started and stalls holding its lock (the `one_more_step`
    fixture is required); yields the stalled session's application_name."""
    app = f"stalled-{uuid.uuid4().hex[:6]}"
    opening = asyncio.create_task(
        open_async_store(f"{base}?schema={schema}&application_name={app}")
    )
    try:
        for _ in range(HANG_GUARD_S * 10):  # until its session sleeps in the extra step
            if opening.done() or _sql(base, _SLEEPING, app, "%pg_sleep%"):
                break
            await asyncio.sleep(0.1)
        assert not opening.done(), "the migration did not stall"
        yield app
    finally:
        _sql(
            base,
            "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = %s",
            app,
        )
        opening.cancel()
        with contextlib.suppress(asyncio.CancelledError, StoreUnavailableError):
            await opening


_SLEEPING = "SELECT 1 FROM pg_stat_activity WHERE application_name = %s AND query LIKE %s"


async def _opens(url: str) -> None:
    store = await asyncio.wait_for(open_async_store(url), HANG_GUARD_S)
    await store.own(f"k/{uuid.uuid4().hex[:8]}", "alice")  # usable, not only open
    await store.aclose()


async def test_a_stalled_migration_holds_back_no_other_schema(
    schemas: tuple[str, str], one_more_step: None
) -> None:
    base, prefix = schemas
    async with stalled_migration(base, f"{prefix}_a"):
        await _opens(f"{base}?schema={prefix}_b")  # a new schema migrates meanwhile


async def test_a_schema_that_is_up_to_date_opens_while_another_migrates(
    schemas: tuple[str, str], one_more_step: None
) -> None:
    base, prefix = schemas
    ready = f"{base}?schema={prefix}_c"
    await _opens(ready)  # migrated before the stall
    async with stalled_migration(base, f"{prefix}_a"):
        await _opens(ready)


async def test_an_open_that_needs_the_held_lock_fails_in_one_line_naming_its_holder(
    schemas: tuple[str, str], one_more_step: None
) -> None:
    base, prefix = schemas
    async with stalled_migration(base, f"{prefix}_a") as app:
        [(pid,)] = _sql(base, "SELECT pid FROM pg_stat_activity WHERE application_name = %s", app)
        url = f"{base}?schema={prefix}_a&migration_timeout=1"
        with pytest.raises(StoreUnavailableError) as err:
            await asyncio.wait_for(open_async_store(url), HANG_GUARD_S)
    text = str(err.value)
    assert "\n" not in text
    assert "migration lock" in text and "over 1 s" in text
    assert f"pid {pid}" in text and f"application_name '{app}'" in text
    assert "migration_timeout" in text  # how to wait longer


async def test_an_up_to_date_schema_takes_no_lock(schemas: tuple[str, str]) -> None:
    import psycopg

    from planfence.shared_memory.backends.postgres_migrate import migration_lock_id

    base, prefix = schemas
    url = f"{base}?schema={prefix}_d"
    await _opens(url)
    conninfo, _ = split_schema(base)
    async with await psycopg.AsyncConnection.connect(conninfo, autocommit=True) as holder:
        await holder.execute("SELECT pg_advisory_lock(%s)", (migration_lock_id(f"{prefix}_d"),))
        await _opens(url + "&migration_timeout=1")


def test_the_migration_timeout_is_a_url_option() -> None:
    url = "postgresql://u@h/db?schema=s&migration_timeout=2.5"
    store = PostgresStore(url)
    assert store.migration_timeout == 2.5
    assert "migration_timeout" not in split_schema(url)[0]  # libpq never sees it
    assert PostgresStore("postgresql://u@h/db").migration_timeout == 5.0
    for bad in ("0", "-1", "soon"):
        with pytest.raises(ConfigError, match="migration_timeout"):
            create_async_store(f"postgresql://u@h/db?migration_timeout={bad}")
