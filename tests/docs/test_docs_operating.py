"""The operating pages say what the PostgreSQL store does: its tables, its schema version, its
pool's defaults, and the pool snippet runs against a real server."""

from __future__ import annotations

import inspect
import re

import pytest
from docpages import REPO, block

from planfence.shared_memory.backends.postgres_migrate import DEFAULT_MIGRATION_TIMEOUT

STORE_PAGE = "docs/operating/store.md"


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
