"""What the demos and benchmarks share: their own store, and progress on stderr.

A demo never writes into the user's default store (`$PLANFENCE_STORE`, `.planfence/memory.db`):
without `--store URL` it runs on a temporary SQLite file that is removed when it ends, and it says
which store it used.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Any, TextIO

from planfence.shared_memory.extras import is_missing
from planfence.shared_memory.urls import redact_url

STORE_HELP = (
    "store URL to run the demo in, which keeps its records (default: a temporary SQLite file, "
    "removed when the demo ends; never $PLANFENCE_STORE)"
)


def team_demo_parser(doc: str | None, *, baseline: str) -> argparse.ArgumentParser:
    """The command line of a framework team demo: --stale-again, --baseline (`baseline` says what
    runs instead of the gate), --scripted and --store; the demo adds its own switches."""
    parser = argparse.ArgumentParser(description=doc.splitlines()[0] if doc else None)
    parser.add_argument("--stale-again", action="store_true", help="the customer changes twice")
    parser.add_argument("--baseline", action="store_true", help=baseline)
    parser.add_argument("--scripted", action="store_true", help="ignore PLANFENCE_LLM_*")
    parser.add_argument("--store", default=None, metavar="URL", help=STORE_HELP)
    return parser


def team_demo_args(
    parser: argparse.ArgumentParser, argv: Sequence[str] | None
) -> argparse.Namespace:
    """`argv` parsed; an empty --store is a usage error, as for every command."""
    args = parser.parse_args(argv)
    if args.store is not None and not args.store.strip():
        parser.error("--store is empty: give a store URL, or leave the option out")
    return args


@dataclass(frozen=True)
class DemoStore:
    """The store a demo runs in: its URL, and whether the demo made it (and removes it)."""

    url: str
    temporary: bool

    def line(self) -> str:
        """The one line that says which store the demo used."""
        if self.temporary:
            return (
                f"store: {redact_url(self.url)} (temporary: removed when the demo ends; "
                "--store URL keeps the records)"
            )
        return f"store: {redact_url(self.url)}"

    def fields(self) -> dict[str, Any]:
        """The same, for JSON output."""
        return {"store": redact_url(self.url), "temporary_store": self.temporary}


@contextmanager
def demo_store(url: str | None) -> Iterator[DemoStore]:
    """`url` when given; otherwise a temporary SQLite store, removed on the way out (also after
    an error or Ctrl-C). Close the store before leaving the block."""
    if url is not None:
        if not url.strip():
            raise ValueError("--store is empty: give a store URL, or leave the option out")
        yield DemoStore(url, False)
        return
    folder = Path(tempfile.mkdtemp(prefix="planfence-demo-"))
    try:
        yield DemoStore(f"sqlite:///{folder / 'demo.db'}", True)
    finally:
        shutil.rmtree(folder, ignore_errors=True)


PLAIN_LINES = 40


class Progress:
    """Progress of a demo or benchmark on stderr: a rich bar on a terminal (with rich, from the
    `bench` extra), plain lines otherwise (so logs and CI show it too). Results never go through
    here, so `--json` output on stdout stays clean."""

    def __init__(
        self, title: str, total: int, *, stream: TextIO | None = None, bar: bool | None = None
    ) -> None:
        self.title = title
        self.total = max(1, total)
        self.done = 0
        self.stream = stream if stream is not None else sys.stderr
        isatty = getattr(self.stream, "isatty", None)
        self.bar = bar if bar is not None else bool(isatty and isatty())
        self._rich: Any = None
        self._task: Any = None

    def __enter__(self) -> Progress:
        if self.bar:
            try:
                from rich.console import Console
                from rich.progress import (
                    BarColumn,
                    MofNCompleteColumn,
                    TextColumn,
                    TimeElapsedColumn,
                )
                from rich.progress import Progress as RichProgress
            except ImportError as exc:  # no rich (the `bench` extra): plain lines, as in a log
                if not is_missing(exc, "bench"):
                    raise
                self.bar = False
                return self
            self._rich = RichProgress(
                TextColumn("{task.description}"),
                BarColumn(),
                MofNCompleteColumn(),
                TimeElapsedColumn(),
                console=Console(file=self.stream),
                # Results printed meanwhile stay on stdout, unless it shares the terminal.
                redirect_stdout=sys.stdout.isatty(),
            )
            self._rich.start()
            self._task = self._rich.add_task(self.title, total=self.total)
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self._rich is not None:
            self._rich.stop()
            self._rich = None

    def set_total(self, total: int) -> None:
        self.total = max(1, total)
        if self._rich is not None:
            self._rich.update(self._task, total=self.total)

    def advance(self, what: str, steps: int = 1, *, line: bool | None = None) -> None:
        """`steps` more units done, the last of them `what`.

        Without a terminal, a line is printed for every step when there are at most
        `PLAIN_LINES` steps, else about `PLAIN_LINES` times in all (`line=None`); `line=True`
        always prints one, `line=False` never does.
        """
        before = self.done
        self.done = min(self.total, self.done + steps)
        if self._rich is not None:
            self._rich.update(self._task, advance=steps, description=f"{self.title}: {what}")
            return
        if line is None:
            stride = max(1, -(-self.total // PLAIN_LINES))
            line = self.done == self.total or self.done // stride > before // stride
        if line:
            print(f"{self.title}: {self.done}/{self.total} {what}", file=self.stream, flush=True)
