"""Shared fixtures: one store per backend (memory, SQLite, PostgreSQL).

PostgreSQL tests use $PLANFENCE_TEST_POSTGRES_URL (default postgresql://postgres@127.0.0.1:5432/test)
with a fresh schema per test. The schema does not exist yet: opening the URL with `create=True`
(the Python default, so the `store` and `astore` fixtures) creates it and its tables, while the
command line and the servers refuse it as a store that does not exist, as they refuse a missing
SQLite file, until `planfence memory own` (or `?create=1` on the URL) has made it. When no server
answers they skip, unless PLANFENCE_REQUIRE_POSTGRES=1 (set by CI), which turns the skip into a
failure.
"""

from __future__ import annotations

import asyncio
import os
import uuid
import warnings
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest
from audit_modes import AUDIT_MODES

from planfence.shared_memory import AsyncStore, Store, create_async_store, open_store

PG_URL = os.environ.get("PLANFENCE_TEST_POSTGRES_URL", "postgresql://postgres@127.0.0.1:5432/test")
REQUIRE_PG = os.environ.get("PLANFENCE_REQUIRE_POSTGRES", "") not in ("", "0", "false")
BACKENDS = ("memory", "sqlite", "postgres")

_pg_state: dict[str, str | None] = {}


def _share_the_default_tls_context() -> None:
    """httpx builds a TLS context for every client it makes, loading the whole CA bundle (tens
    of milliseconds of CPU), even for a client that only ever speaks plain HTTP to loopback; the
    tests make thousands of clients. In this process, every client with the default settings
    shares one context (one with other settings, or with SSL_CERT_FILE or SSL_CERT_DIR set, gets
    its own as before)."""
    import httpx._config
    import httpx._transports.default as transports

    make = httpx._config.create_ssl_context
    shared: list[Any] = []

    def create_ssl_context(verify: Any = True, cert: Any = None, trust_env: bool = True) -> Any:
        env = trust_env and (os.environ.get("SSL_CERT_FILE") or os.environ.get("SSL_CERT_DIR"))
        if verify is not True or cert is not None or env:
            return make(verify=verify, cert=cert, trust_env=trust_env)
        if not shared:
            shared.append(make(verify=verify, cert=cert, trust_env=trust_env))
        return shared[0]

    transports.create_ssl_context = create_ssl_context  # type: ignore[assignment]


_share_the_default_tls_context()


def postgres_unavailable() -> str | None:
    """Why PostgreSQL cannot be used, or None when it can (checked once per session)."""
    if "reason" not in _pg_state:
        try:
            import psycopg
        except ImportError:
            _pg_state["reason"] = "psycopg is not installed: pip install 'planfence[postgres]'"
        else:
            try:
                with psycopg.connect(PG_URL, connect_timeout=3) as conn:
                    conn.execute("SELECT 1")
                _pg_state["reason"] = None
            except Exception as exc:
                _pg_state["reason"] = f"no PostgreSQL at {PG_URL}: {exc}".strip()
    return _pg_state["reason"]


def require_postgres() -> None:
    reason = postgres_unavailable()
    if reason is not None:
        if REQUIRE_PG:
            pytest.fail(f"PLANFENCE_REQUIRE_POSTGRES is set but {reason}")
        pytest.skip(reason)


def _drop_schema(schema: str) -> None:
    import psycopg

    with psycopg.connect(PG_URL, autocommit=True) as conn:
        conn.execute(f"DROP SCHEMA IF EXISTS {schema} CASCADE")


@pytest.fixture
def pg_url() -> Iterator[str]:
    """A PostgreSQL store URL with its own schema, dropped afterwards."""
    require_postgres()
    schema = f"pf_test_{uuid.uuid4().hex[:12]}"
    sep = "&" if "?" in PG_URL else "?"
    yield f"{PG_URL}{sep}schema={schema}"
    _drop_schema(schema)


def store_url_for(backend: str, tmp_path: Path, request: pytest.FixtureRequest) -> str:
    if backend == "memory":
        return "memory://"
    if backend == "sqlite":
        return f"sqlite:///{tmp_path / 'store.db'}"
    return str(request.getfixturevalue("pg_url"))


@pytest.fixture(params=BACKENDS)
def backend(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
def store_url(backend: str, tmp_path: Path, request: pytest.FixtureRequest) -> str:
    return store_url_for(backend, tmp_path, request)


@pytest.fixture
async def astore(store_url: str) -> AsyncIterator[AsyncStore]:
    """An async store, once per backend."""
    store = create_async_store(store_url)
    await store.setup()
    try:
        yield store
    finally:
        await store.aclose()


@pytest.fixture
def store(store_url: str) -> Iterator[Store]:
    """A sync store, once per backend."""
    s = open_store(store_url)
    try:
        yield s
    finally:
        s.close()


@pytest.fixture
def sqlite_url(tmp_path: Path) -> str:
    return f"sqlite:///{tmp_path / 'store.db'}"


@pytest.fixture(params=AUDIT_MODES)
def audit(request: pytest.FixtureRequest) -> str:
    """Each audit mode a gate records allows in (`durable`, then the default `deferred`): the
    fault-injection tests run in both, and must show a block in each."""
    return str(request.param)


@pytest.fixture
def closes_run_sync_loop() -> Iterator[None]:
    """For tests that call a framework's `run_sync` (PydanticAI's `Agent.run_sync`, the OpenAI
    Agents SDK's `Runner.run_sync`): it leaves the event loop it made as the thread's current
    loop, never closed. Close it after the test, as `asyncio.run` closes its own; left open, it
    is garbage collected during some later test, whose teardown then reports the unclosed loop
    and its sockets."""
    yield
    with warnings.catch_warnings():
        # Asking for the current loop when none is set is deprecated on newer Pythons.
        warnings.simplefilter("ignore", DeprecationWarning)
        policy = asyncio.get_event_loop_policy()
        try:
            loop = policy.get_event_loop()
        except RuntimeError:  # no current loop: nothing was left open
            return
        policy.set_event_loop(None)
    if loop.is_closed():
        return
    try:
        loop.run_until_complete(loop.shutdown_asyncgens())
        loop.run_until_complete(loop.shutdown_default_executor())
    finally:
        loop.close()
