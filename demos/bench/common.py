"""What every `planfence bench ...` command shares: options, stores, progress, output, Ctrl-C.

The conventions, the same for every benchmark:

- `--quick` is a smoke run with small counts. `--repeat N` is the number of timed repetitions
  behind each row (benchmarks that repeat calls). Counts must be at least 1.
- `--store URL` picks the backend and the place to benchmark. The benchmark never touches the
  data already there: it works in its own throwaway part of it (a new SQLite file in that file's
  folder, a new PostgreSQL schema on that server) and removes it afterwards. Without `--store`
  it uses a temporary SQLite file. It never uses the default store (`$PLANFENCE_STORE`,
  `.planfence/memory.db`). The output and the JSON say which store was used.
- `--json` prints the results as JSON on stdout instead of the table; `--out FILE` writes the
  same JSON to FILE. Progress goes to stderr: a bar on a terminal, one line per step otherwise.
- Ctrl-C stops the run: what was measured so far is printed (and written with `--out`), the
  temporary stores, files and processes are removed, and the command exits with status 130.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import sys
import tempfile
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from planfence.adapters.cli.common import (
    UsageError,
    non_negative_int,
    positive_int,
    write_out,
)
from planfence.shared_memory import redact_url

BENCH_PG_ENV = "PLANFENCE_BENCH_POSTGRES_URL"
DEFAULT_PG_URL = "postgresql://postgres@127.0.0.1:5432/test"

# ---- numbers


def percentile(samples: Sequence[float], q: float) -> float:
    """The q-th percentile (0..100) by linear interpolation."""
    if not samples:
        return float("nan")
    data = sorted(samples)
    if len(data) == 1:
        return data[0]
    pos = (len(data) - 1) * q / 100.0
    lo = int(pos)
    hi = min(lo + 1, len(data) - 1)
    return data[lo] + (data[hi] - data[lo]) * (pos - lo)


def summary_ms(samples_s: Sequence[float]) -> dict[str, float]:
    ms = [s * 1000.0 for s in samples_s]
    return {
        "p50_ms": round(percentile(ms, 50), 4),
        "p99_ms": round(percentile(ms, 99), 4),
        "mean_ms": round(statistics.fmean(ms), 4) if ms else float("nan"),
    }


# ---- options


def add_quick(parser: argparse.ArgumentParser, what: str) -> None:
    parser.add_argument("--quick", action="store_true", help=f"smoke run: {what}")


def add_repeat(parser: argparse.ArgumentParser, default: int, quick: int, what: str) -> None:
    """`--repeat N`: how many timed repetitions stand behind each row."""
    parser.add_argument(
        "--repeat",
        type=positive_int,
        default=None,
        metavar="N",
        help=f"{what} (default: {default}; {quick} with --quick)",
    )


def add_warmup(parser: argparse.ArgumentParser, default: int, quick: int) -> None:
    parser.add_argument(
        "--warmup",
        type=non_negative_int,
        default=None,
        metavar="N",
        help=f"untimed calls before the timed ones (default: {default}; {quick} with --quick)",
    )


def pick(value: int | None, quick: bool, default: int, quick_default: int) -> int:
    """The count given on the command line, else the default for this kind of run."""
    if value is not None:
        return value
    return quick_default if quick else default


def add_bench_store(parser: argparse.ArgumentParser, default: str | None = None) -> None:
    parser.add_argument(
        "--store",
        default=None,
        metavar="URL",
        help="backend and place to benchmark (sqlite:///path.db or postgresql://...): the "
        "benchmark works in a throwaway file or schema there and removes it afterwards "
        f"(default: {default or 'a temporary SQLite file'}; never the default store)",
    )


# ---- stores


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
    tmp = Path(tempfile.mkdtemp(prefix="planfence-bench-", dir=folder))
    return BenchStore(
        "sqlite",
        f"sqlite:///{tmp / 'bench.db'}",
        "file removed afterwards",
        lambda: shutil.rmtree(tmp, ignore_errors=True),
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


def print_context(results: Mapping[str, Any]) -> None:
    """The lines every benchmark's text output starts with: the stores it used, and notes."""
    for store in results.get("stores", ()):
        print(f"store: {store['url']} ({store['backend']}, {store['temporary']})")
    for note in results.get("notes", ()):
        print(f"note: {note}")


# ---- results, output and Ctrl-C


def new_results(**fields: Any) -> dict[str, Any]:
    """The JSON document a benchmark fills in as it measures (so Ctrl-C can report it)."""
    return {**fields, "interrupted": False}


def run_bench(
    args: argparse.Namespace,
    results: dict[str, Any],
    measure: Callable[[], None],
    show: Callable[[Mapping[str, Any]], None],
) -> int:
    """Run `measure` (which fills `results` in as it goes), then print and write the results.

    Ctrl-C during the measurement: the partial results are printed and written, marked
    `"interrupted": true`, and KeyboardInterrupt goes on up (the command exits with 130).
    Cleanup (stores, files, processes) is `measure`'s own, in its `finally` blocks and context
    managers, which run before the results are printed.
    """
    interrupted = False
    try:
        measure()
    except KeyboardInterrupt:
        interrupted = True
    results["interrupted"] = interrupted
    write_out(args, results)
    if getattr(args, "json", False):
        print(json.dumps(results, sort_keys=True))
    else:
        show(results)
        if interrupted:
            print()
            print("interrupted: the results above are what was measured before Ctrl-C")
        if getattr(args, "out", None):
            print(f"wrote {args.out}")
    sys.stdout.flush()
    if interrupted:
        raise KeyboardInterrupt
    return 0
