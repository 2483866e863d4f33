"""The store and observability pages say what the code does: the PostgreSQL store's tables, schema
version and pool defaults, every span and metric; the pool snippet runs against a real server,
and the page's PgBouncer settings serve a store through a real PgBouncer."""

from __future__ import annotations

import configparser
import contextlib
import inspect
import io
import os
import pwd
import re
import shutil
import socket
import subprocess
import tempfile
import time
import uuid
from pathlib import Path
from urllib.parse import urlsplit

import pytest
from docpages import REPO, block

from planfence.shared_memory import open_store
from planfence.shared_memory.backends.postgres_migrate import DEFAULT_MIGRATION_TIMEOUT

STORE_PAGE = "docs/operating/store.md"
PG_URL = os.environ.get("PLANFENCE_TEST_POSTGRES_URL", "postgresql://postgres@127.0.0.1:5432/test")
REQUIRE_PG = os.environ.get("PLANFENCE_REQUIRE_POSTGRES", "") not in ("", "0", "false")


def section(page: str, heading: str) -> str:
    """The text under one heading of a page, up to the next heading of any level."""
    text = (REPO / page).read_text(encoding="utf-8")
    match = re.search(rf"^#+ {re.escape(heading)}\n(.*?)(?=^#+ |\Z)", text, re.S | re.M)
    assert match, f"no heading {heading!r} in {page}"
    return match.group(1)


def test_the_table_of_tables_names_every_table_the_migrations_create() -> None:
    from planfence.shared_memory.backends.postgres_schema import MIGRATIONS

    created = {"pf_schema"}  # made by the migration runner itself
    dropped: set[str] = set()
    for script in MIGRATIONS:
        created |= set(re.findall(r"CREATE TABLE (?:IF NOT EXISTS )?(\w+)", script))
        dropped |= set(re.findall(r"DROP TABLE (?:IF EXISTS )?(\w+)", script))
    text = section(STORE_PAGE, "Schemas and tables")
    listed = set(re.findall(r"^\| `(pf_\w+)` \|", text, re.M))
    assert listed == created - dropped
    assert f"{len(MIGRATIONS)} in this release" in text


def test_the_pool_section_states_the_stores_defaults() -> None:
    from planfence.shared_memory.backends.postgres import PostgresStore

    params = inspect.signature(PostgresStore.__init__).parameters
    text = " ".join(section(STORE_PAGE, "Pool size").split())
    assert f"at least {params['min_size'].default}, at most {params['max_size'].default}" in text
    assert f"runs up to {params['max_size'].default} operations at a time" in text
    assert f"count up to {params['max_size'].default + 1} connections per open store" in text


def test_the_store_urls_section_states_how_long_an_open_waits_for_a_migration() -> None:
    text = " ".join(section(STORE_PAGE, "Store URLs").split())
    assert f"waits at most {DEFAULT_MIGRATION_TIMEOUT:g} s" in text


def test_the_pool_snippet_opens_a_store_with_its_pool(
    pg_url: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("PLANFENCE_STORE", pg_url)
    code = block(STORE_PAGE, "Pool size")
    scope: dict[str, object] = {"__name__": "snippet"}
    exec(compile(code, STORE_PAGE, "exec"), scope)
    assert capsys.readouterr().out == "0 keys\n"  # a new schema: created, empty
    store = scope["store"]
    pool = store.aio._pool  # type: ignore[attr-defined]
    assert (pool.min_size, pool.max_size) == (2, 16)
    assert store._closed  # type: ignore[attr-defined]  # the with block closed it


OBSERVABILITY = "docs/observability.md"


def test_the_observability_tables_list_every_span_attribute_and_metric() -> None:
    """Every name the telemetry code gives a span, an attribute or a metric is in the tables."""
    sources = [
        REPO / "plugins" / "telemetry.py",
        REPO / "plugins" / "janus" / "controller.py",
        REPO / "adapters" / "mcp" / "tracing.py",
    ]
    code = "\n".join(path.read_text(encoding="utf-8") for path in sources)
    named = set(re.findall(r'"((?:planfence|gen_ai|mcp)\.[a-z_.]+)"', code))
    spans = section(OBSERVABILITY, "Spans")
    metrics = section(OBSERVABILITY, "Metrics")
    tables = spans + metrics
    missing = sorted(n for n in named if f"`{n}`" not in tables and f"`{n} {{" not in tables)
    assert not missing, f"names the telemetry code uses that the tables do not list: {missing}"
    for name in re.findall(r"create_(?:counter|histogram)\(\s*\"([\w.]+)\"", code):
        assert re.search(rf"^\| `{re.escape(name)}` \|", metrics, re.M), name
    for span in ("tools/call {tool}", "MCP send tools/call {tool}"):
        assert f"| `{span}` |" in spans, span


def test_the_ui_section_shows_its_screenshot() -> None:
    text = section(OBSERVABILITY, "The explorer: `planfence ui`")
    images = re.findall(r"!\[[^\]]+\]\(([^)]+)\)", text)
    assert images == ["ui-plan.png"]
    assert (REPO / "docs" / images[0]).stat().st_size > 10_000


def _unavailable(reason: str) -> None:
    if REQUIRE_PG:
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


def _run_as() -> list[str]:
    """PgBouncer refuses to run as root: run it as an unprivileged user then."""
    if os.geteuid() != 0:
        return []
    for name in ("postgres", "nobody"):
        with contextlib.suppress(KeyError):
            return ["-u", pwd.getpwnam(name).pw_name]
    pytest.fail("PgBouncer will not run as root, and there is no postgres or nobody user")


def _bouncer_config(page_ini: str, database: str, port: int, auth_file: Path) -> tuple[str, str]:
    """The page's PgBouncer settings, pointed at this server's `database`, listening on `port`
    and authenticating by `auth_file`; returns (alias, pgbouncer.ini text)."""
    config = configparser.ConfigParser(interpolation=None)
    config.read_string(page_ini)
    [(alias, target)] = config["databases"].items()
    settings = dict(part.split("=", 1) for part in target.split())
    assert settings["pool_mode"] == config["pgbouncer"]["pool_mode"] == "transaction"
    server = urlsplit(PG_URL)
    settings |= {"host": server.hostname or "127.0.0.1", "port": str(server.port or 5432)}
    settings["dbname"] = database
    config["databases"][alias] = " ".join(f"{k}={v}" for k, v in settings.items())
    config["pgbouncer"].update(
        listen_port=str(port), unix_socket_dir="", auth_type="trust", auth_file=str(auth_file)
    )
    out = io.StringIO()
    config.write(out)
    return alias, out.getvalue()


@pytest.mark.postgres
def test_the_pgbouncer_entry_on_the_store_page_serves_a_store() -> None:
    """The page's PgBouncer settings, given this server, a port and authentication, put a
    working store behind transaction pooling."""
    import psycopg

    binary = _pgbouncer()
    try:
        with psycopg.connect(PG_URL, autocommit=True, connect_timeout=5) as conn:
            conn.execute("SELECT 1")
    except psycopg.Error as exc:
        _unavailable(f"no PostgreSQL at {PG_URL}: {exc}")
    user = urlsplit(PG_URL).username or "postgres"
    database = f"pf_docs_bouncer_{uuid.uuid4().hex[:10]}"
    port = _free_port()
    # PgBouncer may run as another user (never as root), so its files live where it can read them.
    folder = Path(tempfile.mkdtemp(prefix="planfence-docs-pgbouncer-"))
    folder.chmod(0o755)
    alias, ini = _bouncer_config(
        block(STORE_PAGE, "Behind PgBouncer", "ini"), database, port, folder / "users.txt"
    )
    (folder / "users.txt").write_text(f'"{user}" ""\n')
    (folder / "pgbouncer.ini").write_text(ini)
    for path in folder.iterdir():
        path.chmod(0o644)
    log_path = folder / "pgbouncer.log"
    with psycopg.connect(PG_URL, autocommit=True) as conn:
        conn.execute(f"CREATE DATABASE {database}")
    proc: subprocess.Popen[bytes] | None = None
    try:
        with log_path.open("w") as log:
            argv = [binary, *_run_as(), str(folder / "pgbouncer.ini")]
            proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT)
        deadline = time.monotonic() + 15
        while True:
            assert proc.poll() is None, log_path.read_text()
            with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), 0.5):
                break
            assert time.monotonic() < deadline, log_path.read_text()
            time.sleep(0.1)
        with open_store(f"postgresql://{user}@127.0.0.1:{port}/{alias}") as store:
            assert store.aio.behind_pooler  # type: ignore[attr-defined]
            store.own("docs/k", "ops")
            put = store.put("docs/k", {"n": 1}, author="ops")
            assert store.head("docs/k") == put.id
    finally:
        if proc is not None:
            proc.terminate()
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        shutil.rmtree(folder, ignore_errors=True)
        with psycopg.connect(PG_URL, autocommit=True) as conn:
            conn.execute(f"DROP DATABASE IF EXISTS {database} WITH (FORCE)")
