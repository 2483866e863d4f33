"""Helpers shared by the command-line subcommands: store option, JSON output, error exits."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from typing import Any

from planfence.shared_memory import PlanFenceError, default_store_url

Handler = Callable[[argparse.Namespace], int]


def add_common(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--store",
        default=None,
        metavar="URL",
        help="store URL (default: $PLANFENCE_STORE or sqlite:///.planfence/memory.db)",
    )
    parser.add_argument("--json", action="store_true", help="machine-readable output")


def store_url(args: argparse.Namespace) -> str:
    return str(args.store or default_store_url())


def emit(args: argparse.Namespace, data: Any, text: str) -> None:
    if getattr(args, "json", False):
        print(json.dumps(data, indent=None, sort_keys=True))
    else:
        print(text)


def fail(message: str, code: int = 1) -> int:
    print(f"planfence: error: {message}", file=sys.stderr)
    return code


def guarded(handler: Handler) -> Handler:
    """Turn planfence errors into one clear line on stderr and a non-zero exit."""

    def run(args: argparse.Namespace) -> int:
        try:
            return handler(args)
        except PlanFenceError as exc:
            if getattr(args, "json", False):
                print(json.dumps({"error": type(exc).__name__, "message": str(exc)}))
            return fail(str(exc))

    return run


def parse_json_arg(text: str, what: str = "value") -> Any:
    from planfence.shared_memory import InvalidValueError

    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise InvalidValueError(
            f"--{what} is not valid JSON: {exc.msg} at column {exc.colno}"
        ) from None
