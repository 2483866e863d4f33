"""Opening a PostgreSQL store: a schema that is not a store is refused (never created by a
command that only reads), and a server that is not PostgreSQL is refused unless the URL vouches
for it."""

from __future__ import annotations

import subprocess
import sys
import uuid
from collections.abc import Iterator
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import pytest

from planfence.adapters.cli.main import main
from planfence.shared_memory import ConfigError, open_async_store, open_store
from planfence.shared_memory.backends.postgres import PostgresStore, split_schema
from planfence.shared_memory.errors import StoreNotFoundError

pytestmark = pytest.mark.postgres

COCKROACH = "CockroachDB CCL v23.1.11 (x86_64-pc-linux-gnu, built 2023/09/27 01:53:43, go1.19.13)"
YUGABYTE = "PostgreSQL 11.2-YB-2.18.0.0-b0 on x86_64-pc-linux-gnu, compiled by clang"


def _sql(url: str, statement: str, *args: Any) -> list[tuple[Any, ...]]:
    import psycopg

    conninfo, _ = split_schema(url)
    with psycopg.connect(conninfo, autocommit=True) as conn:
        cur = conn.execute(statement, args)
        return cur.fetchall() if cur.description else []


def _schema_exists(url: str, schema: str) -> bool:
    return bool(_sql(url, "SELECT 1 FROM pg_namespace WHERE nspname = %s", schema))


def _tables(url: str, schema: str) -> list[str]:
    rows = _sql(url, "SELECT tablename FROM pg_tables WHERE schemaname = %s", schema)
    return sorted(r[0] for r in rows)


def _schema_of(url: str) -> str:
    return url.rpartition("schema=")[2]


def _cli(*argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "planfence.adapters.cli", *argv],
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_a_mistyped_schema_is_refused_and_not_created(pg_url: str) -> None:
    done = _cli("memory", "keys", "--store", pg_url)
    assert done.returncode == 1
    [line] = done.stderr.splitlines()
    schema = _schema_of(pg_url)
    assert line.startswith("planfence: error: no store at postgresql://")
    assert f"schema {schema} does not exist" in line and "memory own" in line
    assert not _schema_exists(pg_url, schema)


def test_the_python_api_refuses_without_create(pg_url: str) -> None:
    with pytest.raises(StoreNotFoundError, match=f"schema {_schema_of(pg_url)} does not exist"):
        open_store(pg_url, create=False)
    with pytest.raises(StoreNotFoundError):
        open_store(f"{pg_url}&create=0")  # the URL's flag wins over the default
    assert not _schema_exists(pg_url, _schema_of(pg_url))


def test_a_schema_without_planfence_tables_is_refused(pg_url: str) -> None:
    schema = _schema_of(pg_url)
    _sql(pg_url, f"CREATE SCHEMA {schema}")
    _sql(pg_url, f"CREATE TABLE {schema}.theirs (x int)")
    done = _cli("memory", "keys", "--store", pg_url)
    assert done.returncode == 1
    assert f"schema {schema} holds no planfence tables" in done.stderr
    assert _tables(pg_url, schema) == ["theirs"]


def test_memory_own_and_create_1_create_the_store(pg_url: str) -> None:
    done = _cli("memory", "own", "trip/1", "--owner", "alice", "--store", pg_url)
    assert done.returncode == 0, done.stderr
    done = _cli("memory", "keys", "--store", pg_url)
    assert done.returncode == 0 and done.stdout.startswith("trip/1\talice"), done.stderr

    other = pg_url.replace("schema=pf_test_", "schema=pf_test_c")
    try:
        done = _cli("memory", "keys", "--store", f"{other}&create=1")
        assert done.returncode == 0 and done.stdout == "(no keys)\n", done.stderr
        assert "pf_schema" in _tables(other, _schema_of(other))
    finally:
        _sql(other, f"DROP SCHEMA IF EXISTS {_schema_of(other)} CASCADE")


@pytest.fixture
def empty_database(pg_url: str) -> Iterator[str]:
    """A database of its own, whose `public` schema is empty (as a new database's is)."""
    server, _ = split_schema(pg_url)
    name = f"pf_test_db_{uuid.uuid4().hex[:10]}"
    _sql(server, f"CREATE DATABASE {name}")
    parts = urlsplit(server)
    yield urlunsplit(parts._replace(path=f"/{name}"))
    _sql(server, f"DROP DATABASE IF EXISTS {name} WITH (FORCE)")


def test_an_empty_public_schema_is_refused_and_stays_empty(empty_database: str) -> None:
    done = _cli("memory", "keys", "--store", empty_database)
    assert done.returncode == 1
    assert "schema public holds no planfence tables" in done.stderr
    assert _tables(empty_database, "public") == []


async def test_a_server_that_is_not_postgresql_is_refused(
    pg_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    async def cockroach(self: PostgresStore, conn: object) -> str:
        return COCKROACH

    monkeypatch.setattr(PostgresStore, "_server_version", cockroach)
    with pytest.raises(ConfigError) as info:
        await open_async_store(pg_url)
    message = str(info.value)
    assert "\n" not in message
    assert "is CockroachDB, not PostgreSQL" in message and "?allow_server=CockroachDB" in message
    assert not _schema_exists(pg_url, _schema_of(pg_url))  # refused before anything is created


async def test_yugabyte_is_told_apart_from_postgresql(
    pg_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    async def yugabyte(self: PostgresStore, conn: object) -> str:
        return YUGABYTE

    monkeypatch.setattr(PostgresStore, "_server_version", yugabyte)
    with pytest.raises(ConfigError, match="is YugabyteDB, not PostgreSQL"):
        await open_async_store(pg_url)


async def test_the_url_can_vouch_for_a_server(pg_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    async def cockroach(self: PostgresStore, conn: object) -> str:
        return COCKROACH

    monkeypatch.setattr(PostgresStore, "_server_version", cockroach)
    with pytest.raises(ConfigError, match="is CockroachDB"):  # vouching for another kind
        await open_async_store(f"{pg_url}&allow_server=YugabyteDB")
    store = await open_async_store(f"{pg_url}&allow_server=cockroachdb")
    try:
        await store.own("k/1", "alice")
        assert await store.owner("k/1") == "alice"
    finally:
        await store.aclose()


def test_the_cli_refuses_a_foreign_server_in_one_line(
    pg_url: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    async def cockroach(self: PostgresStore, conn: object) -> str:
        return COCKROACH

    monkeypatch.setattr(PostgresStore, "_server_version", cockroach)
    assert main(["memory", "own", "k/1", "--owner", "alice", "--store", pg_url]) == 1
    [line] = capsys.readouterr().err.splitlines()
    assert line.startswith("planfence: error: the server at ") and "is CockroachDB" in line


async def test_a_real_postgresql_server_passes(pg_url: str) -> None:
    store = await open_async_store(pg_url)
    try:
        conninfo, _ = split_schema(pg_url)
        version = _sql(conninfo, "SELECT version()")[0][0]
        assert version.startswith("PostgreSQL ")
    finally:
        await store.aclose()
