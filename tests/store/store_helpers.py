"""Helpers for the store tests: raw SQL access to a backend's tables (to tamper), small builders."""

from __future__ import annotations

import sqlite3
from typing import Any

import pytest

from planfence.shared_memory import AsyncStore


def raw_sql(store_url: str, sql: str, args: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """Run `sql` directly on the store's database, bypassing planfence.

    Write `{records}`, `{edges}`, `{keys}`, `{changes}` for table names and `?` for placeholders;
    they are translated for the backend. Returns the rows a SELECT produces.
    """
    if store_url.startswith("sqlite://"):
        from planfence.shared_memory.backends.sqlite import sqlite_path_from_url

        text = sql.format(records="records", edges="edges", keys="keys", changes="changes")
        conn = sqlite3.connect(sqlite_path_from_url(store_url))
        try:
            rows = conn.execute(text, args).fetchall()
            conn.commit()
            return rows
        finally:
            conn.close()
    if store_url.startswith("postgresql://"):
        import psycopg

        from planfence.shared_memory.backends.postgres import split_schema

        conninfo, schema = split_schema(store_url)
        text = sql.format(
            records="pf_records", edges="pf_records", keys="pf_keys", changes="pf_changes"
        ).replace("?", "%s")
        options = f"-c search_path={schema}" if schema else ""
        with psycopg.connect(conninfo, autocommit=True, options=options) as conn:
            cur = conn.execute(text, args)  # type: ignore[arg-type]
            return cur.fetchall() if cur.description else []
    raise ValueError(f"no raw SQL for {store_url}")


def needs_sql(store_url: str) -> None:
    if store_url.startswith("memory://"):
        pytest.skip("the memory backend has no tables to write into")


async def owned(store: AsyncStore, key: str, owner: str = "alice") -> str:
    await store.own(key, owner)
    return key
