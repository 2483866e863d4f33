"""`python -m planfence.adapters.conformance`: the suite for every adapter whose framework is
installed, as a table adapter by case (`--json` prints the results as JSON, `--out FILE` writes
them). Quiet by default: the frameworks' and planfence's logs are not shown; `-v` shows each
case as it ends and the logs. Exit status 1 when a case failed, 2 for a usage error, 130 after
Ctrl-C."""

from __future__ import annotations

import argparse
import asyncio
import logging
import sys
import warnings
from collections.abc import Sequence

from planfence.adapters.cli.common import (
    add_output,
    emit,
    fail,
    write_out,
)
from planfence.adapters.cli.exits import EXIT_FAILURE, EXIT_INTERRUPTED, EXIT_USAGE

from .cases import CASES
from .runner import ERROR, FAIL, HARNESSES, Result, run_suite, table

QUICK = ("a", "b", "c")


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m planfence.adapters.conformance",
        description="Run the adapter conformance cases for every installed framework.",
    )
    p.add_argument(
        "--adapter",
        action="append",
        metavar="NAME",
        help=f"only this adapter (repeatable): {', '.join(HARNESSES)}",
    )
    p.add_argument(
        "--case",
        action="append",
        metavar="LETTER",
        help=f"only this case (repeatable): {', '.join(c.letter for c in CASES)}",
    )
    p.add_argument("--quick", action="store_true", help=f"only cases {', '.join(QUICK)}")
    p.add_argument(
        "-v", "--verbose", action="store_true", help="show each case as it ends, and the logs"
    )
    add_output(p)
    return p


def _progress(result: Result) -> None:
    print(f"  {result.adapter} ({result.case}) {result.status}", file=sys.stderr, flush=True)


def _quiet() -> None:
    """No logs and no warnings: the frameworks' chatter (and the gate's own notes, such as
    unsigned fencing tokens) would bury the table; the cases assert on what matters."""
    logging.disable(logging.CRITICAL)
    warnings.simplefilter("ignore")


def _verbose() -> None:
    # Configured before any framework configures the root logger its own way.
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")


def main(argv: Sequence[str] | None = None) -> int:
    args = parser().parse_args(argv)
    unknown = [a for a in args.adapter or [] if a not in HARNESSES]
    if unknown:
        return fail(f"unknown adapter {unknown[0]!r} (known: {', '.join(HARNESSES)})", EXIT_USAGE)
    letters = {c.letter for c in CASES}
    cases = args.case or (list(QUICK) if args.quick else None)
    bad = [c for c in cases or [] if c not in letters]
    if bad:
        return fail(f"unknown case {bad[0]!r} (known: {', '.join(sorted(letters))})", EXIT_USAGE)
    _verbose() if args.verbose else _quiet()
    try:
        progress = _progress if args.verbose and not args.json else None
        results = asyncio.run(run_suite(args.adapter, cases, progress=progress))
    except KeyboardInterrupt:
        return EXIT_INTERRUPTED
    data = {"results": [r.to_dict() for r in results]}
    emit(args, data, table(results))
    write_out(args, data)
    return EXIT_FAILURE if any(r.status in (FAIL, ERROR) for r in results) else 0


if __name__ == "__main__":
    sys.exit(main())
