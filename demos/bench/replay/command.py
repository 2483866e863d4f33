"""`planfence bench replay`: the options and the run (see the package docstring)."""

from __future__ import annotations

import argparse
import asyncio
import math
import sys

from planfence.adapters.cli.common import UsageError, add_output, non_negative_int, positive_int
from planfence.demos.bench.harness.options import add_bench_store, add_quick, pick
from planfence.demos.bench.harness.output import new_results, run_bench
from planfence.demos.bench.harness.stores import check_store
from planfence.demos.bench.netem.sources import add_link_arguments, load_traces

from .config import (
    DEFAULT_ACTIONS,
    DEFAULT_OWNERS,
    DEFAULT_VALUE_BYTES,
    PATHS,
    QUICK_ACTIONS,
    Config,
)
from .report import plot, print_tables, safety, summarise
from .schedule import DEFAULT_KEYS, DEFAULT_REPLICAS, RATES
from .sweep import replay_all

HELP = "controlled replay: coordination stall per action vs update rate, and invalid actions"


def at_least_two(text: str) -> int:
    value = positive_int(text)
    if value < 2:
        raise argparse.ArgumentTypeError(f"must be at least 2, got {value}")
    return value


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_quick(parser, f"{QUICK_ACTIONS} actions per rate")
    parser.add_argument(
        "--actions",
        type=positive_int,
        default=None,
        metavar="N",
        help=f"actions per rate and executor, the length of the replayed stream "
        f"(default: {DEFAULT_ACTIONS}; {QUICK_ACTIONS} with --quick)",
    )
    parser.add_argument(
        "--rates",
        default=",".join(f"{r:g}" for r in RATES),
        help="update rates, updates per action, separated by commas",
    )
    parser.add_argument(
        "--paths",
        default=",".join(PATHS),
        help="loopback and/or att (the emulated cellular link), separated by commas",
    )
    parser.add_argument("--keys", type=at_least_two, default=DEFAULT_KEYS, help="shared keys")
    parser.add_argument("--owners", type=positive_int, default=DEFAULT_OWNERS, help="owners")
    parser.add_argument(
        "--replicas", type=positive_int, default=DEFAULT_REPLICAS, help="executor replicas"
    )
    parser.add_argument(
        "--value-bytes",
        type=non_negative_int,
        default=DEFAULT_VALUE_BYTES,
        help="size of each record's value",
    )
    parser.add_argument("--seed", type=int, default=1, help="seed of the stream")
    add_bench_store(parser)
    add_output(parser)
    parser.add_argument(
        "--plot", metavar="FILE", help="also save a figure (needs planfence[bench])"
    )
    add_link_arguments(parser)


def config_from(args: argparse.Namespace) -> Config:
    try:
        rates = tuple(sorted({float(x) for x in args.rates.split(",") if x.strip()}))
    except ValueError:
        raise UsageError(f"--rates takes numbers separated by commas, got {args.rates!r}") from None
    paths = tuple(dict.fromkeys(p.strip() for p in args.paths.split(",") if p.strip()))
    if not rates or any(not r >= 0 or math.isinf(r) for r in rates):
        raise UsageError("--rates needs at least one non-negative rate")
    if not paths or any(p not in PATHS for p in paths):
        raise UsageError(f"--paths takes {' and/or '.join(PATHS)}, got {args.paths!r}")
    actions = pick(args.actions, args.quick, DEFAULT_ACTIONS, QUICK_ACTIONS)
    up = down = None
    kind = None
    if "att" in paths:
        up, down, kind = load_traces(args)
    return Config(
        rates=rates,
        actions=actions,
        keys=args.keys,
        owners=args.owners,
        replicas=args.replicas,
        value_bytes=args.value_bytes,
        seed=args.seed,
        paths=paths,
        up=up,
        down=down,
        trace_kind=kind,
        delay_ms=args.delay_ms,
    )


def run(args: argparse.Namespace) -> int:
    config = config_from(args)
    check_store(args.store, shared=True)
    results = new_results(
        settings=config.as_json(), stores=[], rows=[], crossover={}, safety=safety([])
    )

    def measure() -> None:
        try:
            asyncio.run(replay_all(config, args.store, results))
        finally:
            summarise(results, config.paths)

    code = run_bench(args, results, measure, print_tables)
    if args.plot and results["rows"]:
        plot(results, args.plot)
        print(f"wrote {args.plot}", file=sys.stderr if args.json else sys.stdout)
    return code
