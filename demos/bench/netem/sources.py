"""Where the benchmarks over the emulated link get their traces, in this order:
`--trace-up FILE --trace-down FILE`, else the folder `$PLANFENCE_TRACES`, else the shipped
synthetic cellular trace (`synthetic`). The output says which one was used."""

from __future__ import annotations

import argparse
import os
from collections.abc import Mapping
from typing import Any

from planfence.adapters.cli.common import UsageError
from planfence.demos.bench.harness.options import non_negative_float

from .model import DEFAULT_DELAY_MS
from .synthetic import SYNTHETIC_SEED, synthetic_source, synthetic_times
from .trace import Trace, TraceError

TRACES_ENV = "PLANFENCE_TRACES"
DEFAULT_TRACE = "ATT-LTE-driving"


def load_traces(args: argparse.Namespace) -> tuple[Trace, Trace, str]:
    """The uplink and downlink traces the options ask for, and what kind they are ("file" or
    "synthetic"): `--trace-up/--trace-down`, else $PLANFENCE_TRACES, else the synthetic cellular
    trace (see `synthetic`). A trace that was asked for and cannot be read is a usage error."""
    up_path, down_path = args.trace_up, args.trace_down
    if (up_path is None) != (down_path is None):
        raise UsageError("--trace-up and --trace-down go together: give both, or neither")
    if up_path is None:
        folder = os.environ.get(TRACES_ENV)
        if folder:
            up_path = os.path.join(folder, f"{DEFAULT_TRACE}.up")
            down_path = os.path.join(folder, f"{DEFAULT_TRACE}.down")
            if not (os.path.isfile(up_path) and os.path.isfile(down_path)):
                raise UsageError(
                    f"${TRACES_ENV} is {folder!r}, which does not hold {DEFAULT_TRACE}.up and "
                    f"{DEFAULT_TRACE}.down: point it at a folder of mahimahi traces, pass "
                    "--trace-up FILE --trace-down FILE, or unset it to use the synthetic trace"
                )
    if up_path is None or down_path is None:
        up = Trace(tuple(synthetic_times("up")), synthetic_source("up"))
        down = Trace(tuple(synthetic_times("down")), synthetic_source("down"))
        return up, down, "synthetic"
    try:
        return Trace.load(up_path), Trace.load(down_path), "file"
    except TraceError as exc:
        raise UsageError(str(exc)) from None


def add_link_arguments(parser: argparse.ArgumentParser) -> None:
    """The options every benchmark over the emulated link takes: the traces and the delay."""
    parser.add_argument(
        "--trace-up",
        metavar="FILE",
        default=None,
        help=f"mahimahi uplink trace, with --trace-down (default: ${TRACES_ENV}/"
        f"{DEFAULT_TRACE}.up when ${TRACES_ENV} names a folder, else a synthetic cellular trace)",
    )
    parser.add_argument(
        "--trace-down",
        metavar="FILE",
        default=None,
        help=f"mahimahi downlink trace, with --trace-up (default: ${TRACES_ENV}/"
        f"{DEFAULT_TRACE}.down, else the synthetic trace)",
    )
    parser.add_argument(
        "--delay-ms",
        type=non_negative_float,
        default=DEFAULT_DELAY_MS,
        help="one-way propagation delay on the link, ms",
    )


def describe_trace(s: Mapping[str, Any]) -> str:
    """One line naming the trace a run used (from its settings)."""
    if s.get("trace_kind") == "synthetic":
        name = (
            f"synthetic cellular trace (seed {SYNTHETIC_SEED}, the statistics of {DEFAULT_TRACE}; "
            f"real traces: --trace-up/--trace-down or ${TRACES_ENV})"
        )
    else:
        name = f"{s['trace_up']} and {s['trace_down']}"
    return (
        f"trace: {name}; mean {s['trace_up_mean_mbps']} Mbit/s up, "
        f"{s['trace_down_mean_mbps']} Mbit/s down"
    )
