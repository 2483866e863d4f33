"""What a benchmark does with its results: the JSON it fills in, the text it prints, and
Ctrl-C (partial results printed and written, then exit status 130)."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable, Mapping
from typing import Any

from planfence.adapters.cli.common import write_out


def print_context(results: Mapping[str, Any]) -> None:
    """The lines every benchmark's text output starts with: the stores it used, and notes."""
    for store in results.get("stores", ()):
        print(f"store: {store['url']} ({store['backend']}, {store['temporary']})")
    for note in results.get("notes", ()):
        print(f"note: {note}")


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
