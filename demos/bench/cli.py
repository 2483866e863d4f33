"""`planfence bench ...`: benchmarks that print numbers (and JSON / plots on request).

Every benchmark follows the conventions in `harness`: `--quick`, `--repeat N`, `--store URL`,
`--json` / `--out FILE`, progress on stderr, and partial results after Ctrl-C.
"""

from __future__ import annotations

import argparse
import importlib

from planfence.adapters.cli.common import Handler, guarded
from planfence.shared_memory import MissingExtraError

# Each module provides HELP, add_arguments(parser) and run(args) -> int.
BENCHES: dict[str, str] = {
    "store": "planfence.demos.bench.store",
    "gate": "planfence.demos.bench.gate.command",
    "link": "planfence.demos.bench.link.command",
    "proxy": "planfence.demos.bench.proxy",
    "janus": "planfence.demos.bench.janus.command",
    "replay": "planfence.demos.bench.replay.command",
    "window": "planfence.demos.bench.window.command",
    "scale": "planfence.demos.bench.scale.command",
}


def add_parser(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    bench = sub.add_parser("bench", help="run a benchmark")
    bsub = bench.add_subparsers(dest="bench_cmd", required=True, metavar="BENCH")
    for name, module_name in BENCHES.items():
        try:
            module = importlib.import_module(module_name)
        except ModuleNotFoundError as exc:
            if exc.name == module_name:
                continue
            raise
        except MissingExtraError as exc:
            _needs_extra(bsub, name, exc)
            continue
        p = bsub.add_parser(name, help=module.HELP)
        module.add_arguments(p)
        p.set_defaults(handler=guarded(module.run))


def _needs_extra(
    bsub: argparse._SubParsersAction[argparse.ArgumentParser], name: str, exc: MissingExtraError
) -> None:
    """A benchmark whose extra is missing: listed with its pip hint, and run with any arguments
    (`--help` too) it fails with that one error line instead of a usage error."""
    p = bsub.add_parser(
        name, help=f"needs the '{exc.extra}' extra", prefix_chars="\x01", add_help=False
    )
    p.add_argument("args", nargs="*", help=argparse.SUPPRESS)
    p.set_defaults(handler=guarded(_raise(exc)))


def _raise(exc: MissingExtraError) -> Handler:
    def run(args: argparse.Namespace) -> int:
        raise exc

    return run
