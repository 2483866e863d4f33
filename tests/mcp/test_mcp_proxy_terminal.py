"""`planfence proxy -- UPSTREAM` started at a terminal: one Ctrl-C stops it with 130.

The proxy runs on a pseudo-terminal that is its controlling terminal, in its own session, as a
shell runs a foreground command; the test types ^C, so the terminal sends SIGINT to the proxy's
process group. The terminal is left as the proxy found it (blocking), so the shell that shares it
keeps working.
"""

from __future__ import annotations

import fcntl
import json
import os
import pty
import select
import subprocess
import sys
import termios
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from interrupts import default_sigint
from mcp_helpers import World

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="POSIX terminals")

READY = "names a tool the upstream does not have"  # the policy warning, printed once connected


def _controlling_terminal() -> None:
    default_sigint()
    fcntl.ioctl(0, termios.TIOCSCTTY, 0)  # the child's new session gets the pty as its terminal


@contextmanager
def proxy_at_a_terminal(world: World, log: Path) -> Iterator[tuple[subprocess.Popen[bytes], int]]:
    """The proxy with a pseudo-terminal as stdin and stdout; yields (process, terminal master)."""
    master, slave = pty.openpty()
    attrs = termios.tcgetattr(slave)
    attrs[3] &= ~termios.ECHO  # what the test types is not echoed back into what it reads
    termios.tcsetattr(slave, termios.TCSANOW, attrs)
    with log.open("wb") as err:
        proc = subprocess.Popen(
            [sys.executable, *world.proxy_args(upstream=world.upstream_command())],
            stdin=slave,
            stdout=slave,
            stderr=err,
            start_new_session=True,
            preexec_fn=_controlling_terminal,
        )
    try:
        deadline = time.monotonic() + 60
        while READY not in log.read_text() and proc.poll() is None:
            assert time.monotonic() < deadline, log.read_text()
            time.sleep(0.05)
        yield proc, master
        flags = fcntl.fcntl(slave, fcntl.F_GETFL)
        assert not flags & os.O_NONBLOCK, "the proxy left the terminal non-blocking"
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, 9)
            proc.wait()
        os.close(master)
        os.close(slave)


def read_line(master: int, limit: float = 30.0) -> str:
    data = b""
    deadline = time.monotonic() + limit
    while not data.endswith(b"\n"):
        ready, _, _ = select.select([master], [], [], max(0.0, deadline - time.monotonic()))
        assert ready, f"no answer on the terminal: {data!r}"
        data += os.read(master, 65536)
    return data.decode()


def test_one_ctrl_c_at_a_terminal_stops_the_proxy_with_130(world: World, tmp_path: Path) -> None:
    log = tmp_path / "proxy.log"
    with proxy_at_a_terminal(world, log) as (proc, master):
        os.write(master, b"\x03")  # ^C: the terminal signals the foreground process group
        code = proc.wait(timeout=30)  # a generous bound; before the fix it never came
    assert code == 130, log.read_text()
    assert log.read_text().rstrip().endswith("planfence: error: interrupted")


def test_the_proxy_answers_on_a_terminal(world: World, tmp_path: Path) -> None:
    ping = {"jsonrpc": "2.0", "id": 1, "method": "ping"}
    with proxy_at_a_terminal(world, tmp_path / "proxy.log") as (proc, master):
        os.write(master, json.dumps(ping).encode() + b"\n")
        answer = json.loads(read_line(master))
        os.write(master, b"\x03")
        assert proc.wait(timeout=30) == 130
    assert answer["id"] == 1 and "result" in answer, answer
