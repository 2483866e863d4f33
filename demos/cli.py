"""The `planfence` command: one entry point over every layer's subcommands."""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence

# (module, attribute) pairs; each provides add_parser(subparsers). Order is the help order.
COMMANDS: tuple[str, ...] = (
    "planfence.adapters.cli.memory",
    "planfence.adapters.cli.plan",
    "planfence.adapters.cli.audit",
    "planfence.adapters.owner_service.cli",
    "planfence.adapters.mcp.cli",
    "planfence.demos.demo_cli",
    "planfence.demos.bench.cli",
)


def _version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("planfence")
    except PackageNotFoundError:  # running from a source tree that was never installed
        return "unknown"


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="planfence",
        description="No action on a stale plan; no harmful memory update deployed blindly.",
    )
    parser.add_argument("--version", action="version", version=f"planfence {_version()}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    for name in COMMANDS:
        try:
            module = importlib.import_module(name)
        except ModuleNotFoundError as exc:
            if exc.name == name:  # that command is not part of this build
                continue
            raise
        module.add_parser(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    code: int = args.handler(args)
    return code


if __name__ == "__main__":
    sys.exit(main())
