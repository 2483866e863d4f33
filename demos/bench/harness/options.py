"""The options every `planfence bench ...` command spells the same way, and their counts."""

from __future__ import annotations

import argparse
import math

from planfence.adapters.cli.common import non_negative_int, positive_int

from .stores import BENCH_PG_ENV, DEFAULT_PG_URL


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


def add_bench_store(parser: argparse.ArgumentParser, *, postgres_too: bool = False) -> None:
    """`--store URL`; `postgres_too`: without it, the benchmark also measures PostgreSQL (see
    `stores.extra_postgres`)."""
    default = "a temporary SQLite file"
    if postgres_too:
        default += f", and PostgreSQL at ${BENCH_PG_ENV} or {DEFAULT_PG_URL}"
    parser.add_argument(
        "--store",
        default=None,
        metavar="URL",
        help="backend and place to benchmark (sqlite:///path.db or postgresql://...): the "
        "benchmark works in a throwaway file or schema there and removes it afterwards "
        f"(default: {default}; never the default store)",
    )


def _number(text: str) -> float:
    try:
        return float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None


def non_negative_float(text: str) -> float:
    """argparse type: a finite number >= 0."""
    value = _number(text)
    if not value >= 0.0 or math.isinf(value):
        raise argparse.ArgumentTypeError(f"must be a non-negative number, got {text}")
    return value


def positive_float(text: str) -> float:
    """argparse type: a finite number > 0."""
    value = _number(text)
    if not 0.0 < value < math.inf:
        raise argparse.ArgumentTypeError(f"must be more than 0, got {text}")
    return value
