"""`planfence bench scale`: options and the run (see the package docstring)."""

from __future__ import annotations

import argparse
import asyncio
from contextlib import AsyncExitStack
from typing import Any

from planfence.adapters.cli.common import add_output
from planfence.demos.bench.harness.options import (
    add_bench_store,
    add_quick,
    add_repeat,
    pick,
    positive_float,
)
from planfence.demos.bench.harness.output import new_results, run_bench
from planfence.demos.bench.harness.stores import (
    check_store,
    extra_postgres,
    open_bench_store,
    open_extra_postgres,
)
from planfence.demos.support import Progress

from .axes import deps_axis, process_axis, size_axis, slope
from .report import plot, print_tables

HELP = "check latency vs store size and |D(a)|, and checks/s vs gate processes on one store"

REPEAT, QUICK_REPEAT = 200, 20
SIZES = tuple((10 ** (e + 1), 10**e) for e in range(2, 6))  # (records, keys): 10^3/10^2 ..
QUICK_SIZES = SIZES[:2]
DEPS = (1, 2, 4, 8, 16, 32, 64)
PROCESSES = (1, 2, 4, 8)
SECONDS, QUICK_SECONDS = 5.0, 0.5


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_quick(
        parser,
        f"{QUICK_REPEAT} checks per row, store sizes up to {QUICK_SIZES[-1][0]} records, "
        f"{QUICK_SECONDS:g} s per process count",
    )
    add_repeat(parser, REPEAT, QUICK_REPEAT, "timed checks per row")
    parser.add_argument(
        "--seconds",
        type=positive_float,
        default=None,
        metavar="S",
        help=f"how long each process count runs (default {SECONDS:g}, --quick {QUICK_SECONDS:g})",
    )
    add_bench_store(parser, postgres_too=True)
    parser.add_argument(
        "--plot", metavar="FILE", help="also save a figure (needs planfence[bench])"
    )
    add_output(parser)


def run(args: argparse.Namespace) -> int:
    repeat = pick(args.repeat, args.quick, REPEAT, QUICK_REPEAT)
    seconds = args.seconds if args.seconds is not None else QUICK_SECONDS if args.quick else SECONDS
    sizes = QUICK_SIZES if args.quick else SIZES
    check_store(args.store, shared=True)
    extra_pg = extra_postgres(args.store)
    results = new_results(
        repeat=repeat, seconds=seconds, stores=[], notes=[], size=[], deps=[], processes=[]
    )

    def measure() -> None:
        asyncio.run(_bench(results, repeat, seconds, sizes, args.store, extra_pg))

    code = run_bench(args, results, measure, print_tables)
    if args.plot:
        plot(results, args.plot)
        if not getattr(args, "json", False):
            print(f"wrote {args.plot}")
    return code


async def _bench(
    results: dict[str, Any],
    repeat: int,
    seconds: float,
    sizes: tuple[tuple[int, int], ...],
    main_url: str | None,
    extra_pg: str | None,
) -> None:
    async with AsyncExitStack() as stack:
        target, store = await open_bench_store(stack, main_url, results)
        pg = None if extra_pg is None else await open_extra_postgres(extra_pg, results, stack)
        shared = (target.backend != "memory") + (pg is not None)
        steps = len(sizes) + len(DEPS) + len(PROCESSES) * shared
        progress = stack.enter_context(Progress("bench scale", steps))
        try:
            await size_axis(store, sizes, repeat, results["size"], progress)
            await deps_axis(store, DEPS, repeat, results["deps"], progress)
        finally:
            results["deps_slope_us_per_key"] = _slope_us(results["deps"])
        if target.backend != "memory":
            rows = results["processes"]
            await process_axis(
                target.backend, target.url, store, PROCESSES, seconds, rows, progress
            )
        if pg is not None:
            url = results["stores"][-1]["url"]
            await process_axis(
                "postgres", url, pg, PROCESSES, seconds, results["processes"], progress
            )


def _slope_us(rows: list[dict[str, Any]]) -> float | None:
    found = slope(rows, "deps", "check_p50_ms")
    return round(found * 1000, 2) if found is not None else None
