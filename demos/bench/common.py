"""Kept for `bench/janus.py` until it moves into its package: the shared harness is
`planfence.demos.bench.harness`."""

from .harness import (
    BENCH_PG_ENV,
    DEFAULT_PG_URL,
    BenchStore,
    add_bench_store,
    add_quick,
    add_repeat,
    add_warmup,
    bench_store,
    check_store,
    new_results,
    percentile,
    pick,
    print_context,
    run_bench,
    summary_ms,
)

__all__ = [
    "BENCH_PG_ENV",
    "DEFAULT_PG_URL",
    "BenchStore",
    "add_bench_store",
    "add_quick",
    "add_repeat",
    "add_warmup",
    "bench_store",
    "check_store",
    "new_results",
    "percentile",
    "pick",
    "print_context",
    "run_bench",
    "summary_ms",
]
