"""`planfence bench store`: latency of the shared-memory store's hot operations.

For each backend (SQLite and PostgreSQL by default) it measures, from one process, sequentially:

- `head_read`    `head(key)`: what the gate asks an owner for, once per key in scope;
- `cas_advance`  `put(key, value, expected_head=last)`: a new version stored and the head moved
                 by compare-and-set, in one transaction (the owner's write);
- `record_put`   `add(...)`: a derived record (a plan) stored with its parents, no head moved;
- `frontier`     `frontier([plan], [key])` for a plan whose lineage reaches the key's version
                 after `depth` parent hops (1, 10, 100).

Stores are throwaway: a temporary SQLite file (next to the `--store` path when one is given) and
a fresh PostgreSQL schema, dropped afterwards. Numbers only; nothing is asserted about time.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import shutil
import sys
import tempfile
import time
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from planfence.shared_memory import (
    AsyncStore,
    MissingExtraError,
    StoreUnavailableError,
    create_async_store,
)

from .common import summary_ms, write_json

HELP = "store latency: head read, CAS advance, record put, frontier at depth 1/10/100"

BENCH_PG_ENV = "PLANFENCE_BENCH_POSTGRES_URL"
DEFAULT_PG_URL = "postgresql://postgres@127.0.0.1:5432/test"
DEPTHS = (1, 10, 100)
KEY = "bench/requirements"
OPS = ("head_read", "cas_advance", "record_put", "frontier")


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--store",
        metavar="URL",
        help="benchmark only this backend/location (sqlite:///path.db, postgresql://..., "
        "memory://); a throwaway file or schema is used there and removed afterwards. "
        f"Default: SQLite in a temp dir and PostgreSQL at ${BENCH_PG_ENV} or {DEFAULT_PG_URL}",
    )
    p.add_argument("--json", metavar="FILE", help='write {"rows": [...]} to FILE')
    p.add_argument(
        "--iterations", type=int, default=300, help="timed calls per measurement (default 300)"
    )
    p.add_argument("--warmup", type=int, default=20, help="untimed calls first (default 20)")


@dataclass
class Target:
    """A throwaway store location and how to remove it."""

    backend: str
    url: str
    cleanup: Callable[[], None]


def _sqlite_target(base: Path | None) -> Target:
    tmp = Path(tempfile.mkdtemp(prefix="planfence-bench-", dir=base))
    return Target("sqlite", f"sqlite:///{tmp / 'bench.db'}", lambda: shutil.rmtree(tmp, True))


def _postgres_target(url: str) -> Target:
    from planfence.shared_memory.backends.postgres import split_schema

    conninfo, _ = split_schema(url)
    schema = f"pf_bench_{uuid.uuid4().hex[:12]}"
    sep = "&" if "?" in conninfo else "?"

    def drop() -> None:
        import psycopg

        try:
            with psycopg.connect(conninfo, autocommit=True, connect_timeout=5) as conn:
                conn.execute(f"DROP SCHEMA IF EXISTS {schema} CASCADE")
        except psycopg.Error:
            pass

    return Target("postgres", f"{conninfo}{sep}schema={schema}", drop)


def _targets(store: str | None) -> list[Target]:
    if store is None:
        pg = os.environ.get(BENCH_PG_ENV) or DEFAULT_PG_URL
        return [_sqlite_target(None), _postgres_target(pg)]
    if store.startswith("sqlite://"):
        from planfence.shared_memory.backends.sqlite import sqlite_path_from_url

        path = sqlite_path_from_url(store)
        base = None if path == ":memory:" else Path(path).resolve().parent
        if base is not None:
            base.mkdir(parents=True, exist_ok=True)
        return [_sqlite_target(base)]
    if store.startswith(("postgresql://", "postgres://")):
        return [_postgres_target(store)]
    return [Target(store.split(":", 1)[0], store, lambda: None)]


async def _time(
    fn: Callable[[int], Awaitable[Any]], iterations: int, warmup: int
) -> tuple[list[float], float]:
    for i in range(warmup):
        await fn(i)
    samples = []
    start = time.perf_counter()
    for i in range(iterations):
        t0 = time.perf_counter()
        await fn(warmup + i)
        samples.append(time.perf_counter() - t0)
    return samples, time.perf_counter() - start


def _row(
    backend: str, op: str, depth: int | None, samples: list[float], total: float
) -> dict[str, Any]:
    s = summary_ms(samples)
    return {
        "backend": backend,
        "op": op,
        "depth": depth,
        "p50_ms": s["p50_ms"],
        "p99_ms": s["p99_ms"],
        "ops_per_s": round(len(samples) / total, 1) if total > 0 else float("inf"),
    }


async def _chain(store: AsyncStore, root: str, depth: int) -> str:
    """A plan whose parent walk reaches `root` after exactly `depth` hops."""
    parent = root
    for i in range(depth - 1):
        parent = (await store.add(f"bench/step/{i % 7}", i, author="b", parents=[parent])).id
    return (await store.add("bench/plan", {"depth": depth}, author="b", parents=[parent])).id


async def bench_store(
    store: AsyncStore, backend: str, iterations: int, warmup: int
) -> list[dict[str, Any]]:
    rows = []
    await store.own(KEY, "owner")
    head = (await store.put(KEY, {"v": 0}, author="owner", expected_head=None)).id

    async def head_read(_: int) -> None:
        await store.head(KEY)

    samples, total = await _time(head_read, iterations, warmup)
    rows.append(_row(backend, "head_read", None, samples, total))

    async def cas_advance(i: int) -> None:
        nonlocal head
        head = (
            await store.put(KEY, {"v": i + 1}, author="owner", parents=[head], expected_head=head)
        ).id

    samples, total = await _time(cas_advance, iterations, warmup)
    rows.append(_row(backend, "cas_advance", None, samples, total))

    async def record_put(i: int) -> None:
        await store.add("bench/plan", {"plan": i}, author="planner", parents=[head], kind="plan")

    samples, total = await _time(record_put, iterations, warmup)
    rows.append(_row(backend, "record_put", None, samples, total))

    for depth in DEPTHS:
        plan = await _chain(store, head, depth)

        async def frontier(_: int, plan: str = plan, depth: int = depth) -> None:
            fr = await store.frontier([plan], [KEY])
            if fr.used(KEY) != {head} or fr.visited != depth + 1:
                raise RuntimeError(f"benchmark chain is wrong at depth {depth}: {fr}")

        samples, total = await _time(frontier, max(1, iterations), min(warmup, 5))
        rows.append(_row(backend, "frontier", depth, samples, total))
    return rows


async def _run_target(target: Target, iterations: int, warmup: int) -> list[dict[str, Any]]:
    store = create_async_store(target.url)
    try:
        await store.setup()
        return await bench_store(store, target.backend, iterations, warmup)
    finally:
        await store.aclose()


def format_table(rows: list[dict[str, Any]]) -> str:
    head = f"{'backend':<9} {'op':<12} {'depth':>5} {'p50_ms':>9} {'p99_ms':>9} {'ops/s':>9}"
    lines = [head, "-" * len(head)]
    for r in rows:
        depth = "" if r["depth"] is None else str(r["depth"])
        lines.append(
            f"{r['backend']:<9} {r['op']:<12} {depth:>5} {r['p50_ms']:>9.3f} "
            f"{r['p99_ms']:>9.3f} {r['ops_per_s']:>9.1f}"
        )
    return "\n".join(lines)


def run(args: argparse.Namespace) -> int:
    iterations = max(1, int(args.iterations))
    warmup = max(0, int(args.warmup))
    rows: list[dict[str, Any]] = []
    failed = False
    for target in _targets(args.store):
        try:
            rows += asyncio.run(_run_target(target, iterations, warmup))
        except (StoreUnavailableError, MissingExtraError) as exc:
            note = f"skipped {target.backend}: {exc}"
            if args.store is not None:  # the one backend asked for
                print(f"planfence: error: {note}", file=sys.stderr)
                failed = True
            else:
                print(f"note: {note}")
        finally:
            target.cleanup()
    print(f"one process, sequential calls, {iterations} timed per row")
    print(format_table(rows))
    write_json(args.json, {"rows": rows})
    return 1 if failed or not rows else 0
