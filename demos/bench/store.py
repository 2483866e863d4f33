"""`planfence bench store`: latency of the shared-memory store's hot operations.

For each backend (SQLite and PostgreSQL by default) it measures, from one process, sequentially:

- `head_read`    `head(key)`: what the gate asks an owner for, once per key in scope;
- `cas_advance`  `put(key, value, expected_head=last)`: a new version stored and the head moved
                 by compare-and-set, in one transaction (the owner's write);
- `record_put`   `add(...)`: a derived record (a plan) stored with its parents, no head moved;
- `frontier`     `frontier([plan], [key])` for a plan whose lineage reaches the key's version
                 after `depth` parent hops (1, 10, 100).

Stores are throwaway: a temporary SQLite file and a fresh PostgreSQL schema (on the server at
$PLANFENCE_BENCH_POSTGRES_URL, skipped with a note when none answers), removed afterwards. With
`--store URL` only that backend is measured, in a throwaway file or schema at that place.
Numbers only; nothing is asserted about time.
"""

from __future__ import annotations

import argparse
import asyncio
import time
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from planfence.adapters.cli.common import add_output
from planfence.demos.bench.harness.options import (
    add_bench_store,
    add_quick,
    add_repeat,
    add_warmup,
    pick,
)
from planfence.demos.bench.harness.output import new_results, print_context, run_bench
from planfence.demos.bench.harness.stats import summary_ms
from planfence.demos.bench.harness.stores import (
    BenchStore,
    bench_store,
    check_store,
    extra_postgres,
)
from planfence.demos.support import Progress
from planfence.shared_memory import (
    AsyncStore,
    MissingExtraError,
    StoreUnavailableError,
    create_async_store,
)

HELP = "store latency: head read, CAS advance, record put, frontier at depth 1/10/100"

DEPTHS = (1, 10, 100)
KEY = "bench/requirements"
OPS = ("head_read", "cas_advance", "record_put", "frontier")
ROWS_PER_BACKEND = 3 + len(DEPTHS)
REPEAT, QUICK_REPEAT = 300, 20
WARMUP, QUICK_WARMUP = 20, 2


def add_arguments(p: argparse.ArgumentParser) -> None:
    add_quick(p, f"{QUICK_REPEAT} timed calls per row")
    add_repeat(p, REPEAT, QUICK_REPEAT, "timed calls per row")
    add_warmup(p, WARMUP, QUICK_WARMUP)
    add_bench_store(p, postgres_too=True)
    add_output(p)


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


async def measure_store(
    store: AsyncStore,
    backend: str,
    repeat: int,
    warmup: int,
    rows: list[dict[str, Any]],
    progress: Progress,
) -> None:
    """Append one row per operation to `rows` as soon as it is measured."""

    def done(row: dict[str, Any]) -> None:
        rows.append(row)
        depth = "" if row["depth"] is None else f" depth {row['depth']}"
        progress.advance(f"{backend} {row['op']}{depth}")

    await store.own(KEY, "owner")
    head = (await store.put(KEY, {"v": 0}, author="owner", expected_head=None)).id

    async def head_read(_: int) -> None:
        await store.head(KEY)

    samples, total = await _time(head_read, repeat, warmup)
    done(_row(backend, "head_read", None, samples, total))

    async def cas_advance(i: int) -> None:
        nonlocal head
        head = (
            await store.put(KEY, {"v": i + 1}, author="owner", parents=[head], expected_head=head)
        ).id

    samples, total = await _time(cas_advance, repeat, warmup)
    done(_row(backend, "cas_advance", None, samples, total))

    async def record_put(i: int) -> None:
        await store.add("bench/plan", {"plan": i}, author="planner", parents=[head], kind="plan")

    samples, total = await _time(record_put, repeat, warmup)
    done(_row(backend, "record_put", None, samples, total))

    for depth in DEPTHS:
        plan = await _chain(store, head, depth)

        async def frontier(_: int, plan: str = plan, depth: int = depth) -> None:
            fr = await store.frontier([plan], [KEY])
            if fr.used(KEY) != {head} or fr.visited != depth + 1:
                raise RuntimeError(f"benchmark chain is wrong at depth {depth}: {fr}")

        samples, total = await _time(frontier, repeat, min(warmup, 5))
        done(_row(backend, "frontier", depth, samples, total))


async def _run_target(
    target: BenchStore,
    repeat: int,
    warmup: int,
    rows: list[dict[str, Any]],
    progress: Progress,
) -> None:
    store = create_async_store(target.url)
    try:
        await store.setup()
        await measure_store(store, target.backend, repeat, warmup, rows, progress)
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


def _show(results: Mapping[str, Any]) -> None:
    print_context(results)
    print(f"one process, sequential calls, {results['repeat']} timed per row")
    print(format_table(results["rows"]))


def run(args: argparse.Namespace) -> int:
    repeat = pick(args.repeat, args.quick, REPEAT, QUICK_REPEAT)
    warmup = pick(args.warmup, args.quick, WARMUP, QUICK_WARMUP)
    check_store(args.store, shared=False)
    explicit = args.store is not None
    extra_pg = extra_postgres(args.store)
    urls = [args.store] if extra_pg is None else [args.store, extra_pg]
    results = new_results(repeat=repeat, warmup=warmup, stores=[], notes=[], rows=[])

    def measure() -> None:
        with Progress("bench store", ROWS_PER_BACKEND * len(urls)) as progress:
            for url in urls:
                target = bench_store(url, shared=False)
                try:
                    results["stores"].append(target.describe())
                    asyncio.run(_run_target(target, repeat, warmup, results["rows"], progress))
                except (StoreUnavailableError, MissingExtraError) as exc:
                    if explicit:  # the one backend asked for
                        raise
                    results["stores"].pop()
                    results["notes"].append(f"skipped {target.backend}: {exc}")
                    progress.advance(f"{target.backend} skipped", ROWS_PER_BACKEND)
                finally:
                    target.cleanup()

    code = run_bench(args, results, measure, _show)
    return code if results["rows"] else 1
