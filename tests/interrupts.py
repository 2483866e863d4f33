"""Ctrl-C in tests: a child that a test interrupts must not inherit an ignored SIGINT.

A shell that starts a background job without job control (`python -m pytest &` in a script)
starts it with SIGINT ignored, and every process it starts inherits that, so a test's SIGINT
would do nothing. The children a test interrupts start through `interruptible(argv)`, which
restores the default disposition before the real command runs (Python then installs its
KeyboardInterrupt handler as in a terminal).
"""

from __future__ import annotations

import platform
import signal
import sys
import time
from pathlib import Path

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


READ_SYSCALL = {"x86_64": "0", "aarch64": "63"}  # read(2)'s number, as /proc/PID/syscall shows it


def wait_reading_stdin(pid: int, limit: float = 30.0) -> None:
    """Wait until process `pid` is blocked reading its standard input (Linux: its current
    system call is read(0, ...)), so that a signal sent next finds the command running, not
    still importing. Elsewhere, or if `/proc` does not tell, it waits a fixed second and a half."""
    syscall = Path(f"/proc/{pid}/syscall")
    read = READ_SYSCALL.get(platform.machine())
    if read is None or not syscall.exists():
        time.sleep(1.5)
        return
    deadline = time.monotonic() + limit
    while time.monotonic() < deadline:
        try:
            fields = syscall.read_text().split()
        except OSError:
            fields = []
        if fields[:2] == [read, "0x0"]:  # read(2) on fd 0
            return
        time.sleep(0.02)
    raise AssertionError(f"process {pid} never read its standard input within {limit} s")
