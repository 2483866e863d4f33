"""Helpers shared by the command-line subcommands: store option, output, argument types, errors.

Conventions every subcommand follows: one error line `planfence: error: ...` on stderr, exit 2
for usage errors, 1 for failures, 130 after Ctrl-C; `--json` prints JSON on stdout and `--out
FILE` writes it to a file.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from planfence.shared_memory import PlanFenceError, default_store_url

Handler = Callable[[argparse.Namespace], int]

EXIT_FAILURE = 1
EXIT_USAGE = 2
EXIT_INTERRUPTED = 130


class UsageError(Exception):
    """A command-line mistake found after parsing; exits with status 2."""


def add_store_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--store",
        default=None,
        metavar="URL",
        help="store URL (default: $PLANFENCE_STORE or sqlite:///.planfence/memory.db)",
    )


def add_json_flag(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--json", action="store_true", help="print JSON instead of text")


def add_common(parser: argparse.ArgumentParser) -> None:
    add_store_option(parser)
    add_json_flag(parser)


def add_output(parser: argparse.ArgumentParser) -> None:
    """`--json` (print JSON to stdout) and `--out FILE` (also write the JSON to FILE)."""
    add_json_flag(parser)
    parser.add_argument(
        "--out", default=None, metavar="FILE", help="also write the results as JSON to FILE"
    )


def store_url(args: argparse.Namespace) -> str:
    if args.store is not None and not args.store.strip():
        raise UsageError("--store is empty: give a store URL, or leave the option out")
    return str(args.store or default_store_url())


def positive_int(text: str) -> int:
    """argparse type: an integer >= 1 (counts, repetitions, limits)."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value


def non_negative_int(text: str) -> int:
    """argparse type: an integer >= 0 (sequence numbers, offsets)."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"must not be negative, got {value}")
    return value


def emit(args: argparse.Namespace, data: Any, text: str) -> None:
    if getattr(args, "json", False):
        print(json.dumps(data, indent=None, sort_keys=True))
    else:
        print(text)


def write_out(args: argparse.Namespace, data: Any) -> None:
    """Write `data` as JSON to `--out FILE` when given (parent folders are created)."""
    path = getattr(args, "out", None)
    if path:
        target = Path(path)
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(json.dumps(data, indent=2, sort_keys=True) + "\n")


def fail(message: str, code: int = EXIT_FAILURE) -> int:
    print(f"planfence: error: {message}", file=sys.stderr)
    return code


def guarded(handler: Handler) -> Handler:
    """Turn planfence errors into one clear line on stderr and a non-zero exit."""

    def run(args: argparse.Namespace) -> int:
        try:
            return handler(args)
        except UsageError as exc:
            return fail(str(exc), EXIT_USAGE)
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
    except RecursionError:
        raise InvalidValueError(f"--{what} is nested too deeply to be a stored value") from None
