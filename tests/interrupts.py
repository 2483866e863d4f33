"""Ctrl-C in tests: a child that a test interrupts must not inherit an ignored SIGINT.

A shell that starts a background job without job control (`python -m pytest &` in a script)
starts it with SIGINT ignored, and every process it starts inherits that, so a test's SIGINT
would do nothing. The children a test interrupts start through `interruptible(argv)`, which
restores the default disposition before the real command runs (Python then installs its
KeyboardInterrupt handler as in a terminal).
"""

from __future__ import annotations

import signal
import sys

_LAUNCH = (
    "import os, signal, sys; signal.signal(signal.SIGINT, signal.SIG_DFL); "
    "os.execvp(sys.argv[1], sys.argv[1:])"
)


def interruptible(argv: list[str]) -> list[str]:
    """`argv`, started with the default SIGINT disposition whatever this process inherited."""
    return [sys.executable, "-c", _LAUNCH, *argv]


def default_sigint() -> None:
    """A `preexec_fn`: the default SIGINT disposition in the child, before it runs."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)
