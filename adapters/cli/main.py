"""The `planfence` command: the adapters' subcommands, plus those other packages register.

Subcommands from the layer above (the demos and benchmarks) register through the
`planfence.commands` entry-point group, so this module never imports them: each entry point names
a module with `add_parser(subparsers)`.

Every failure ends in one line on stderr, `planfence: error: ...`: exit status 2 for usage errors,
1 for failures, 130 after Ctrl-C. A closed output pipe (`planfence audit | head`) ends the command
at once, quietly, with 141.
Set `PLANFENCE_DEBUG=1` to see the traceback of an unexpected error.
"""

from __future__ import annotations

import argparse
import importlib
import os
import select
import signal
import stat
import sys
import threading
from collections.abc import Sequence
from typing import Any, NoReturn

import planfence
from planfence.adapters.cli.common import (
    UsageError,
    fail,
)
from planfence.adapters.cli.exits import EXIT_FAILURE, EXIT_INTERRUPTED, EXIT_USAGE

# This layer's own subcommands: name -> module with add_parser(subparsers), in help order.
COMMANDS: dict[str, str] = {
    "memory": "planfence.adapters.cli.memory",
    "plan": "planfence.adapters.cli.plan",
    "audit": "planfence.adapters.cli.audit",
    "check": "planfence.adapters.cli.check",
    "policy": "planfence.adapters.cli.policy",
    "serve-owner": "planfence.adapters.owner_service.cli",
    "keys": "planfence.adapters.owner_service.keys_cli",
    "proxy": "planfence.adapters.mcp.cli",
    "ui": "planfence.adapters.ui.cli",
}
ENTRY_POINT_GROUP = "planfence.commands"

# A process killed by SIGPIPE reports 128 + 13; `planfence ... | head` ends the same way.
EXIT_BROKEN_PIPE = 141


class DefaultsFormatter(argparse.HelpFormatter):
    """Show every meaningful default in the help, unless the help text already names it."""

    def _get_help_string(self, action: argparse.Action) -> str | None:
        text = action.help or ""
        default = action.default
        if (
            default is None
            or default is False
            or default == []
            or default is argparse.SUPPRESS
            or "default" in text
            or not action.option_strings
        ):
            return text
        return f"{text} (default: %(default)s)" if text else "(default: %(default)s)"


class CommandParser(argparse.ArgumentParser):
    """argparse with the one-line error convention (subcommand parsers inherit it)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        kwargs.setdefault("formatter_class", DefaultsFormatter)
        super().__init__(*args, **kwargs)

    def error(self, message: str) -> NoReturn:
        fail(f"{message} (see '{self.prog} --help')", EXIT_USAGE)
        raise SystemExit(EXIT_USAGE)


def build_parser(argv: Sequence[str] | None = None) -> argparse.ArgumentParser:
    """The parser; given the command line, only the named subcommand's module is imported (a
    proxy or a store command starts without loading the benchmarks)."""
    parser = CommandParser(
        prog="planfence",
        description="No action on a stale plan; no harmful memory update deployed blindly.",
    )
    parser.add_argument("--version", action="version", version=f"planfence {planfence.__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    commands = {**COMMANDS}
    first = next((a for a in argv or () if not a.startswith("-")), None)
    if first not in commands:
        commands.update(_registered())
    if first in commands:
        commands = {first: commands[first]}
    for module_name in commands.values():
        try:
            module = importlib.import_module(module_name)
        except ModuleNotFoundError as exc:
            if exc.name == module_name:  # that command is not part of this build
                continue
            raise
        module.add_parser(sub)
    return parser


def _registered() -> dict[str, str]:
    """Subcommands registered in the `planfence.commands` entry-point group, by name."""
    from importlib.metadata import entry_points

    found = entry_points(group=ENTRY_POINT_GROUP)
    return {ep.name: ep.value for ep in sorted(found, key=lambda ep: ep.name)}


def _quiet_stdout() -> None:
    # The reader went away: point stdout at /dev/null so the interpreter's final flush is silent.
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    except (OSError, ValueError):
        pass


# Commands that serve until stopped: their stdout is a protocol (`proxy` over stdio) or a ready
# line, and a reader that goes away does not end them.
SERVERS = frozenset({"proxy", "ui", "serve-owner"})


class ReaderWatch:
    """Ends a command as soon as the reader of its piped stdout goes away (`... | head -3`),
    not only at its next write: the pipe reports an error once its reading end is closed, and
    the command is then interrupted as by Ctrl-C (so it stops its work and its child processes
    the way it does then) and exits quietly with 141, as a process killed by SIGPIPE."""

    def __init__(self) -> None:
        self.gone = False
        self._stopped = False
        self._lock = threading.Lock()

    def start(self) -> None:
        try:
            fd = sys.stdout.fileno()
            if not stat.S_ISFIFO(os.fstat(fd).st_mode) or not hasattr(select, "poll"):
                return
        except (OSError, ValueError, AttributeError):  # no real stdout (captured, closed)
            return
        threading.Thread(
            target=self._watch, args=(fd,), name="planfence-stdout", daemon=True
        ).start()

    def _watch(self, fd: int) -> None:
        poller = select.poll()
        poller.register(fd, 0)  # errors and hang-ups are always reported
        try:
            while not poller.poll():
                pass
        except OSError:
            return
        with self._lock:
            if self._stopped:
                return
            self.gone = True
            signal.pthread_kill(threading.main_thread().ident or 0, signal.SIGINT)

    def stop(self) -> None:
        """The command is done: a reader leaving from now on changes nothing."""
        with self._lock:
            self._stopped = True


def _parse(parser: argparse.ArgumentParser, argv: list[str]) -> argparse.Namespace:
    """`parse_args`, but arguments nobody knows are reported by the subcommand they were given
    to, so the error points at that subcommand's help (`planfence memory keys --help`)."""
    args, extra = parser.parse_known_args(argv)
    if extra:
        _innermost(parser, args).error(f"unrecognized arguments: {' '.join(extra)}")
    return args


def _innermost(
    parser: argparse.ArgumentParser, args: argparse.Namespace
) -> argparse.ArgumentParser:
    """The (sub)parser of the deepest subcommand `args` chose."""
    while True:
        chosen = None
        for action in parser._actions:
            if isinstance(action, argparse._SubParsersAction):
                chosen = action.choices.get(getattr(args, action.dest, None) or "")
        if not isinstance(chosen, argparse.ArgumentParser):
            return parser
        parser = chosen


def main(argv: Sequence[str] | None = None) -> int:
    reader = ReaderWatch()
    try:
        args_list = list(sys.argv[1:] if argv is None else argv)
        parser = build_parser(args_list)
        args = _parse(parser, args_list)
        if argv is None and args.command not in SERVERS:
            reader.start()
        code: int = args.handler(args)
        sys.stdout.flush()
        reader.stop()
        return code
    except KeyboardInterrupt:
        reader.stop()
        if reader.gone:
            _quiet_stdout()
            return EXIT_BROKEN_PIPE
        return fail("interrupted", EXIT_INTERRUPTED)
    except BrokenPipeError:
        reader.stop()
        _quiet_stdout()
        return EXIT_BROKEN_PIPE
    except UsageError as exc:
        return fail(str(exc), EXIT_USAGE)
    except SystemExit:
        raise
    except Exception as exc:
        if os.environ.get("PLANFENCE_DEBUG"):
            raise
        return fail(
            f"{type(exc).__name__}: {exc} (set PLANFENCE_DEBUG=1 for the traceback)", EXIT_FAILURE
        )
    finally:
        reader.stop()


if __name__ == "__main__":
    sys.exit(main())
