"""The PostgreSQL store behind PgBouncer (Debian's `pgbouncer`), started here for the test.

In transaction pooling everything works: writes, reads, a gate's checks, the change feed's
readers (which poll, and say so once), the whole store conformance suite. What cannot work is
refused at open in one line: `?schema=` (a session setting) and statement pooling.

PgBouncer missing: the tests skip, saying how to install it, unless PLANFENCE_REQUIRE_POSTGRES=1
(CI installs it), which makes them fail instead.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import pwd
import shutil
import socket
import subprocess
import tempfile
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

import pytest

from planfence.plugins.gate import (
    Gate,
    Policy,
    ToolCall,
    create_plan,
    find_decisions,
    refreshed_parents,
)
from planfence.shared_memory import (
    AsyncStore,
    ConfigError,
    create_async_store,
    open_async_store,
    open_store,
)
from planfence.shared_memory.backends import postgres_pooler
from planfence.shared_memory.conformance import CHECKS, TAMPER, TAMPER_HEADS, run_check
from planfence.shared_memory.conformance.checks_leases import a_backend_without_leases_refuses_them
from planfence.shared_memory.conformance.runner import Check

pytestmark = pytest.mark.postgres

PG_URL = os.environ.get("PLANFENCE_TEST_POSTGRES_URL", "postgresql://postgres@127.0.0.1:5432/test")
REQUIRE = os.environ.get("PLANFENCE_REQUIRE_POSTGRES", "") not in ("", "0", "false")
POLICY = Policy.from_toml('[tools.ship]\ndepends_on = ["order/{id}"]\n')
TABLES = "pf_records, pf_keys, pf_changes, pf_journal, pf_journal_labels, pf_leases"


def _unavailable(reason: str) -> None:
    if REQUIRE:
        pytest.fail(f"PLANFENCE_REQUIRE_POSTGRES is set but {reason}")
    pytest.skip(reason)


def _pgbouncer() -> str:
    found = shutil.which("pgbouncer") or next(
        (p for p in ("/usr/sbin/pgbouncer", "/usr/bin/pgbouncer") if os.access(p, os.X_OK)), None
    )
    if found is None:
        _unavailable("pgbouncer is not installed (Debian: apt-get install pgbouncer)")
    assert found is not None
    return found


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass(frozen=True)
class Bouncer:
    port: int
    database: str
    user: str

    def url(self, alias: str, query: str = "") -> str:
        return f"postgresql://{self.user}@127.0.0.1:{self.port}/{alias}{query}"


def _on(database: str) -> str:
    """PG_URL, on another database of the same server (straight to it, not through PgBouncer)."""
    return urlsplit(PG_URL)._replace(path=f"/{database}").geturl()


def _direct(sql: str) -> None:
    import psycopg

    with psycopg.connect(PG_URL, autocommit=True, connect_timeout=5) as conn:
        conn.execute(sql)


@pytest.fixture(scope="module")
def bouncer() -> Iterator[Bouncer]:
    """PgBouncer on a free port in front of a database of its own: alias `txn` pools it in
    transaction mode, `stmt` in statement mode, `session` in session mode."""
    binary = _pgbouncer()
    try:
        _direct("SELECT 1")
    except Exception as exc:
        _unavailable(f"no PostgreSQL at {PG_URL}: {exc}")
    server = urlsplit(PG_URL)
    user = server.username or "postgres"
    database = f"pf_bouncer_{uuid.uuid4().hex[:10]}"
    _direct(f"CREATE DATABASE {database}")
    folder = Path(tempfile.mkdtemp(prefix="planfence-pgbouncer-"))
    folder.chmod(0o755)  # PgBouncer refuses to run as root: it reads these as another user
    port = _free_port()
    target = f"host={server.hostname or '127.0.0.1'} port={server.port or 5432} dbname={database}"
    (folder / "users.txt").write_text(f'"{user}" ""\n')
    (folder / "pgbouncer.ini").write_text(
        "[databases]\n"
        f"txn = {target} pool_mode=transaction\n"
        f"stmt = {target} pool_mode=statement\n"
        f"session = {target} pool_mode=session\n"
        "[pgbouncer]\n"
        f"listen_addr = 127.0.0.1\nlisten_port = {port}\nunix_socket_dir =\n"
        f"auth_type = trust\nauth_file = {folder / 'users.txt'}\n"
        "pool_mode = transaction\ndefault_pool_size = 4\nmax_client_conn = 200\n"
    )
    for path in folder.iterdir():
        path.chmod(0o644)
    argv = [binary, str(folder / "pgbouncer.ini")]
    if os.geteuid() == 0:
        argv[1:1] = ["-u", _unprivileged_user()]
    log = (folder / "pgbouncer.log").open("w")
    proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT)
    try:
        _wait_listening(port, proc, folder)
        yield Bouncer(port, database, user)
    finally:
        proc.terminate()
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        log.close()
        shutil.rmtree(folder, ignore_errors=True)
        _direct(f"DROP DATABASE IF EXISTS {database} WITH (FORCE)")


def _unprivileged_user() -> str:
    for name in ("postgres", "nobody"):
        with contextlib.suppress(KeyError):
            return pwd.getpwnam(name).pw_name
    pytest.fail("PgBouncer will not run as root, and there is no postgres or nobody user")


def _wait_listening(port: int, proc: subprocess.Popen[bytes], folder: Path) -> None:
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            pytest.fail(f"pgbouncer exited: {(folder / 'pgbouncer.log').read_text()}")
        with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), 0.5):
            return
        time.sleep(0.1)
    pytest.fail(f"pgbouncer did not listen on {port}: {(folder / 'pgbouncer.log').read_text()}")


@pytest.fixture
def through(bouncer: Bouncer) -> str:
    """The store URL through PgBouncer's transaction pool, on emptied tables."""
    import psycopg

    with psycopg.connect(_on(bouncer.database), autocommit=True) as conn:
        row = conn.execute("SELECT to_regclass('pf_leases') IS NOT NULL").fetchone()
        if row and row[0]:
            conn.execute(f"TRUNCATE {TABLES} RESTART IDENTITY")
    return bouncer.url("txn")


async def test_store_and_gate_work_in_transaction_pooling(
    through: str, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    monkeypatch.setattr(postgres_pooler, "_told", set())
    with caplog.at_level(logging.INFO, logger="planfence.shared_memory.backends.postgres"):
        store = await open_async_store(through)
        other = await open_async_store(through)  # a second store: said once per process
    told = [r.getMessage() for r in caplog.records if "connection pooler" in r.getMessage()]
    assert len(told) == 1 and "poll" in told[0] and "LISTEN/NOTIFY" in told[0], told
    assert store.behind_pooler  # type: ignore[attr-defined]
    try:
        await _writes_and_reads(store, other)
        await _gate_allows_and_replans(store)
        await _feed_readers_see_changes(store, other)
    finally:
        await other.aclose()
        await store.aclose()


async def _writes_and_reads(store: AsyncStore, other: AsyncStore) -> None:
    # Many clients, each statement repeated past psycopg's prepare threshold: server sessions
    # change under every connection, so a prepared statement would be missing on most of them.
    keys = [f"load/{i}" for i in range(8)]
    for key in keys:
        await store.own(key, "sales")

    async def client(key: str) -> None:
        for n in range(12):
            rec = await store.put(key, {"n": n}, author="sales")
            assert (await other.heads([key]))[key] == rec.id
            assert (await other.get(rec.id)).value == {"n": n}

    await asyncio.gather(*(client(k) for k in keys))
    assert len(await other.changes(0, 10_000)) == 8 + 8 * 12


async def _gate_allows_and_replans(store: AsyncStore) -> None:
    await store.own("order/7", "sales")
    order = await store.put("order/7", {"line": "1 Harbour St"}, author="sales")
    plan = await create_plan(store, author="planner", parents=[order.id])
    async with Gate(store, POLICY) as gate:
        assert (await gate.check(ToolCall("ship", {"id": "7"}, plan.id))).verdict == "allow"
        await store.put("order/7", {"line": "9 Hill Rd"}, author="sales")
        stale = await gate.check(ToolCall("ship", {"id": "7"}, plan.id))
        assert stale.verdict == "replan"
        new = await create_plan(
            store,
            author="planner",
            supersedes=plan.id,
            parents=refreshed_parents(plan, stale),
        )
        assert (await gate.check(ToolCall("ship", {"id": "7"}, new.id))).verdict == "allow"
    decisions = sorted(d.verdict for d in await find_decisions(store))
    assert decisions == ["allow", "allow", "replan"]


async def _feed_readers_see_changes(store: AsyncStore, other: AsyncStore) -> None:
    since = await other.last_seq()
    seen: list[str] = []

    async def read() -> None:
        async for change in other.subscribe(since):
            seen.append(change.key)
            if len(seen) == 2:
                return

    reader = asyncio.create_task(read())
    await store.own("feed/a", "ops")
    await store.own("feed/b", "ops")
    await asyncio.wait_for(reader, 30)
    assert seen == ["feed/a", "feed/b"]


def test_a_sync_store_and_its_feed_work_in_transaction_pooling(through: str) -> None:
    with open_store(through) as store, open_store(through) as reader:
        store.own("sync/k", "ops")
        put = store.put("sync/k", {"n": 1}, author="ops")
        changes = list(reader.subscribe(0, idle_timeout=0.5))
        assert [c.head for c in changes if c.kind == "head"] == [put.id]
        assert [c.key for c in reader.iter_changes()] == ["sync/k", "sync/k"]


def _check_id(check: Check) -> str:
    return check.__name__  # type: ignore[attr-defined,no-any-return]


@pytest.mark.parametrize("check", CHECKS, ids=_check_id)
async def test_the_store_conformance_suite_passes_behind_pgbouncer(
    check: Check, through: str
) -> None:
    ran = await run_check(
        check, lambda limits: create_async_store(through, limits=limits), {TAMPER, TAMPER_HEADS}
    )
    assert ran == (check is not a_backend_without_leases_refuses_them)


async def test_a_schema_behind_pgbouncer_is_refused_in_one_line(bouncer: Bouncer) -> None:
    with pytest.raises(ConfigError) as err:
        await open_async_store(bouncer.url("txn", "?schema=elsewhere"))
    text = str(err.value)
    assert "\n" not in text
    assert "connection pooler" in text and "?schema=elsewhere" in text
    assert "database of its own" in text  # what works instead


async def test_statement_pooling_is_refused_in_one_line(bouncer: Bouncer) -> None:
    with pytest.raises(ConfigError) as err:
        await open_async_store(bouncer.url("stmt"))
    text = str(err.value)
    assert "\n" not in text
    assert "connection pooler" in text and "transactions" in text
    assert "pool_mode=transaction" in text  # which pool mode works


async def test_session_pooling_works_too(bouncer: Bouncer) -> None:
    async with create_async_store(bouncer.url("session")) as store:
        await store.own(f"session/{uuid.uuid4().hex[:8]}", "ops")
        assert store.behind_pooler  # type: ignore[attr-defined]
