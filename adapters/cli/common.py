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

from planfence.shared_memory import PlanfenceError, Store, open_store
from planfence.shared_memory.errors import InvalidValueError, StoreNotFoundError
from planfence.shared_memory.factory import default_store_url

from .exits import EXIT_FAILURE, EXIT_USAGE

Handler = Callable[[argparse.Namespace], int]


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


def given_store(args: argparse.Namespace) -> str | None:
    """`--store` as given (None when left out); an empty value is a usage error."""
    url: str | None = args.store
    if url is not None and not url.strip():
        raise UsageError("--store is empty: give a store URL, or leave the option out")
    return url


def store_url(args: argparse.Namespace) -> str:
    """`--store`, or the default store when it is left out."""
    return given_store(args) or default_store_url()


def open_cli_store(
    args: argparse.Namespace, *, writes: bool = False, creates: bool = False
) -> Store:
    """Open `--store` for one command.

    Only commands that create state (`creates`) may create a new store, and they say so, naming
    where (a mistyped path shows at once); every other command refuses a store that does not
    exist and names the path, so a mistyped path is an error and never a new, empty store.
    Writes to `memory://` are lost when the command exits: warn.
    """
    url = store_url(args)
    if writes and url.startswith("memory://"):
        warn("memory:// keeps nothing after this command exits; the write is lost")
    try:
        return open_store(url, create=False)
    except StoreNotFoundError as missing:
        if not creates:
            raise
        store = open_store(url, create=True)
        print(
            f"planfence: created a new store at {missing.path} (there was none; check the path "
            "if you meant an existing store)",
            file=sys.stderr,
        )
        return store


def require_existing_store(url: str) -> None:
    """Raise `StoreNotFoundError` (naming it) when `url` names a store that does not exist."""
    open_store(url, create=False).close()


LOG_LEVELS = ("critical", "error", "warning", "info", "debug")


def port_number(text: str) -> int:
    """argparse type: a TCP port, 0 (any free port) to 65535."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a port number") from None
    if not 0 <= value <= 65535:
        raise argparse.ArgumentTypeError(f"port must be 0..65535, got {value}")
    return value


def warn(message: str) -> None:
    print(f"planfence: warning: {message}", file=sys.stderr)


def split_ids(values: list[str]) -> list[str]:
    """Ids given as repeated options and/or comma-separated lists, in order, without blanks."""
    return [part.strip() for v in values for part in v.split(",") if part.strip()]


def read_value_arg(value: str | None, value_file: str | None) -> Any:
    """The JSON value of `--value TEXT` or `--value-file FILE` (`-` reads stdin)."""
    if value_file is None:
        return parse_json_arg(value or "")
    if value_file == "-":
        text = sys.stdin.read()
    else:
        try:
            text = Path(value_file).read_text(encoding="utf-8")
        except FileNotFoundError:
            raise UsageError(f"--value-file {value_file}: no such file") from None
        except (OSError, UnicodeDecodeError) as exc:
            raise UsageError(f"--value-file {value_file}: cannot read it ({exc})") from None
    return parse_json_arg(text, "value-file")


def _int_at_least(text: str, minimum: int, why: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
    if value < minimum:
        raise argparse.ArgumentTypeError(f"{why}, got {value}")
    return value


def positive_int(text: str) -> int:
    """argparse type: an integer >= 1 (counts, repetitions, limits)."""
    return _int_at_least(text, 1, "must be at least 1")


def non_negative_int(text: str) -> int:
    """argparse type: an integer >= 0 (sequence numbers, offsets)."""
    return _int_at_least(text, 0, "must not be negative")


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
        except PlanfenceError as exc:
            message = str(exc)
            if isinstance(exc, StoreNotFoundError):  # said for command-line users
                found = f": {exc.detail}" if exc.detail else ""
                message = (
                    f"no store at {exc.path}{found} (check {exc.check}, or --store / "
                    "$PLANFENCE_STORE; 'planfence memory own' starts a new store, and so does "
                    "?create=1 on the URL)"
                )
            if getattr(args, "json", False):
                print(json.dumps({"error": type(exc).__name__, "message": message}))
            return fail(message)

    return run


def parse_json_arg(text: str, what: str = "value") -> Any:
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise InvalidValueError(
            f"--{what} is not valid JSON: {exc.msg} at column {exc.colno}"
        ) from None
    except RecursionError:
        raise InvalidValueError(f"--{what} is nested too deeply to be a stored value") from None
