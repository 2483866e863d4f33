"""The throwaway store each benchmark works in, chosen by `--store URL` (see `harness`)."""

from __future__ import annotations

import asyncio
import os
import sys
import uuid
from collections.abc import Callable
from contextlib import AsyncExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from planfence.adapters.cli.common import UsageError
from planfence.shared_memory import AsyncStore, PlanfenceError, open_async_store
from planfence.shared_memory.urls import redact_url

from .scratch import Scratch

BENCH_PG_ENV = "PLANFENCE_BENCH_POSTGRES_URL"
DEFAULT_PG_URL = "postgresql://postgres@127.0.0.1:5432/test"


@dataclass
class BenchStore:
    """A throwaway store the benchmark owns: its URL, and how it is removed."""

    backend: str
    url: str
    removal: str  # what `cleanup` removes, for the output
    cleanup: Callable[[], None]

    def describe(self) -> dict[str, Any]:
        return {"backend": self.backend, "url": redact_url(self.url), "temporary": self.removal}


def _sqlite_store(folder: Path | None) -> BenchStore:
    scratch = Scratch(parent=folder)  # a killed run's folder goes at the next run's start
    return BenchStore(
        "sqlite",
        f"sqlite:///{scratch.path / 'bench.db'}",
        "file removed afterwards",
        scratch.remove,
    )


def _postgres_store(url: str) -> BenchStore:
    from planfence.shared_memory.backends.postgres import split_schema

    conninfo, _ = split_schema(url)
    schema = f"pf_bench_{uuid.uuid4().hex[:12]}"
    sep = "&" if "?" in conninfo else "?"

    def drop() -> None:
        try:
            import psycopg
        except ImportError:  # then the schema was never created either
            return
        try:
            conn = psycopg.connect(conninfo, autocommit=True, connect_timeout=5)
        except psycopg.Error:  # no server: nothing was created there
            return
        try:
            with conn:
                conn.execute(f"DROP SCHEMA IF EXISTS {schema} CASCADE")
        except psycopg.Error as exc:
            print(f"note: could not drop PostgreSQL schema {schema}: {exc}", file=sys.stderr)

    return BenchStore(
        "postgres", f"{conninfo}{sep}schema={schema}", f"schema {schema} dropped afterwards", drop
    )


def check_store(url: str | None, *, shared: bool) -> None:
    """Refuse, before anything starts, a `--store URL` the benchmark cannot use.

    `shared`: other processes (owner services, the proxy) open the store too, so memory:// is
    refused."""
    if url is None:
        return
    if not url.strip():
        raise UsageError("--store is empty: give a store URL, or leave the option out")
    if url.startswith("sqlite://"):
        from planfence.shared_memory.backends.sqlite import sqlite_path_from_url

        if sqlite_path_from_url(url) == ":memory:":
            raise UsageError("--store: an in-memory SQLite store cannot be benchmarked here")
        return
    if url.startswith(("postgresql://", "postgres://")):
        return
    if url.startswith("memory:"):
        if shared:
            raise UsageError(
                "--store memory:// lives in one process; this benchmark runs several: "
                "use sqlite:///path.db or postgresql://..."
            )
        return
    scheme = url.split(":", 1)[0] if ":" in url else url
    raise UsageError(
        f"--store: unsupported scheme {scheme!r}: use sqlite:///path.db or postgresql://..."
    )


def bench_store(url: str | None, *, shared: bool) -> BenchStore:
    """The throwaway store for `--store URL` (None: a temporary SQLite file)."""
    check_store(url, shared=shared)
    if url is None:
        return _sqlite_store(None)
    if url.startswith("sqlite://"):
        from planfence.shared_memory.backends.sqlite import sqlite_path_from_url

        folder = Path(sqlite_path_from_url(url)).resolve().parent
        folder.mkdir(parents=True, exist_ok=True)
        return _sqlite_store(folder)
    if url.startswith(("postgresql://", "postgres://")):
        return _postgres_store(url)
    return BenchStore("memory", url, "gone when the run ends", lambda: None)


async def open_bench_store(
    stack: AsyncExitStack, url: str | None, results: dict[str, Any]
) -> tuple[BenchStore, AsyncStore]:
    """The throwaway store for `--store URL` (shared with other processes), open and named in
    `results["stores"]`; closed and removed when `stack` closes."""
    target = bench_store(url, shared=True)
    stack.callback(target.cleanup)
    results["stores"].append(target.describe())
    store = await open_async_store(target.url)
    stack.push_async_callback(store.aclose)
    return target, store


def extra_postgres(url: str | None) -> str | None:
    """The PostgreSQL server a run without `--store URL` measures too ($PLANFENCE_BENCH_POSTGRES_URL
    or the local default); None when `--store` names the one store to measure."""
    return None if url is not None else os.environ.get(BENCH_PG_ENV) or DEFAULT_PG_URL


async def open_extra_postgres(
    url: str, results: dict[str, Any], stack: AsyncExitStack
) -> AsyncStore | None:
    """That server's store in a throwaway schema (removed when `stack` closes), named in
    `results["stores"]`; or None and a note in `results["notes"]` when no server answers."""
    target = bench_store(url, shared=False)
    stack.callback(target.cleanup)
    try:
        store = await asyncio.wait_for(open_async_store(target.url), 15)
    except (PlanfenceError, OSError, asyncio.TimeoutError) as exc:
        why = f"{type(exc).__name__}: {exc}".strip()
        results["notes"].append(f"PostgreSQL rows skipped, no server at {url} ({why})")
        return None
    stack.push_async_callback(store.aclose)
    results["stores"].append(target.describe())
    return store
