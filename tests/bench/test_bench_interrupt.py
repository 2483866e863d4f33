"""Ctrl-C during a benchmark, for real: a `planfence bench ...` process gets SIGINT once it has
measured something. It prints and writes what it measured, leaves no temporary file, store or
process behind, prints no traceback, and exits with 130."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import IO

import pytest
from interrupts import interruptible

PROGRESS_WAIT_S = 120.0


def read_lines_until(stream: IO[str], prefix: str, count: int, timeout: float) -> list[str]:
    """Lines from `stream` until `count` of them start with `prefix`."""
    deadline = time.monotonic() + timeout
    lines: list[str] = []
    while sum(line.startswith(prefix) for line in lines) < count:
        if time.monotonic() > deadline:
            raise AssertionError(f"no progress after {timeout} s: {lines}")
        line = stream.readline()
        if not line:
            raise AssertionError(f"the benchmark ended before it was interrupted: {lines}")
        lines.append(line)
    return lines


def processes_with(marker: str) -> list[int]:
    """Live processes whose environment holds `marker` (this test's children and theirs)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            environ = (entry / "environ").read_bytes()
            state = (entry / "stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if marker.encode() in environ and state != "Z":
            found.append(int(entry.name))
    return found


def interrupt(
    argv: list[str],
    tmp_path: Path,
    progress: str,
    steps: int,
    *,
    terminal: bool = False,
    later_s: float = 0.0,
) -> tuple[int, str, str, Path, str]:
    """Run `planfence bench ...` with its own temporary folder, send SIGINT `later_s` after
    `steps` progress lines; (exit status, stdout, stderr, temporary folder, environment marker).
    `terminal`: as a Ctrl-C at a terminal does, signal the whole process group (the benchmark
    and every process it started), not the benchmark alone."""
    tmpdir = tmp_path / "tmp"
    tmpdir.mkdir()
    marker = f"planfence-interrupt-test-{uuid.uuid4().hex}"
    env = {
        **os.environ,
        "TMPDIR": str(tmpdir),
        "PLANFENCE_INTERRUPT_TEST": marker,
        "PLANFENCE_BENCH_POSTGRES_URL": "postgresql://postgres@127.0.0.1:1/test",
    }
    env.pop("PLANFENCE_TRACES", None)
    proc = subprocess.Popen(
        interruptible([sys.executable, "-m", "planfence.adapters.cli", "bench", *argv]),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        cwd=tmp_path,
        start_new_session=terminal,
    )
    try:
        assert proc.stderr is not None
        before = read_lines_until(proc.stderr, progress, steps, PROGRESS_WAIT_S)
        time.sleep(later_s)
        if terminal:
            os.killpg(proc.pid, signal.SIGINT)
        else:
            proc.send_signal(signal.SIGINT)
        out, rest = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    return proc.returncode, out, "".join(before) + rest, tmpdir, marker


def assert_clean_exit(code: int, err: str, tmpdir: Path, marker: str) -> None:
    assert code == 130, err
    assert "Traceback" not in err and "KeyboardInterrupt" not in err, err
    assert err.rstrip().endswith("planfence: error: interrupted"), err
    assert list(tmpdir.iterdir()) == []  # temporary stores, folders and logs are gone
    deadline = time.monotonic() + 10
    while processes_with(marker) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert processes_with(marker) == []  # every service the benchmark started has stopped


def test_bench_store_interrupted_reports_what_it_measured(tmp_path: Path) -> None:
    out = tmp_path / "partial.json"
    argv = ["store", "--repeat", "3000", "--warmup", "0", "--out", str(out)]
    code, stdout, err, tmpdir, marker = interrupt(argv, tmp_path, "bench store:", 2)
    assert_clean_exit(code, err, tmpdir, marker)

    data = json.loads(out.read_text())
    assert data["interrupted"] is True
    rows = data["rows"]
    assert 2 <= len(rows) < 12
    assert rows[0]["op"] == "head_read" and rows[1]["op"] == "cas_advance"
    assert "interrupted: the results above are what was measured before Ctrl-C" in stdout
    table = [line for line in stdout.splitlines() if line.startswith("sqlite ")]
    assert len(table) == len(rows)
    assert "store: sqlite:///" in stdout


@pytest.mark.slow
def test_bench_gate_interrupted_stops_its_owner_services(tmp_path: Path) -> None:
    out = tmp_path / "partial.json"
    argv = ["gate", "--repeat", "400", "--json", "--out", str(out)]
    code, stdout, err, tmpdir, marker = interrupt(argv, tmp_path, "bench gate:", 2)
    assert_clean_exit(code, err, tmpdir, marker)

    printed = json.loads(stdout)  # --json: the partial results, as JSON, on stdout
    assert printed == json.loads(out.read_text())
    assert printed["interrupted"] is True
    assert 2 <= len(printed["rows"]) < 27 and printed["traffic"] == []


@pytest.mark.slow
def test_bench_replay_interrupted_keeps_the_rates_it_finished(tmp_path: Path) -> None:
    out = tmp_path / "partial.json"
    argv = ["replay", "--paths", "loopback", "--actions", "6", "--out", str(out)]
    code, stdout, err, tmpdir, marker = interrupt(argv, tmp_path, "bench replay:", 1)
    assert_clean_exit(code, err, tmpdir, marker)

    data = json.loads(out.read_text())
    assert data["interrupted"] is True
    rates = sorted({r["rate"] for r in data["rows"]})
    assert 1 <= len(rates) < 7
    assert {r["executor"] for r in data["rows"]} == {"planfence", "eager", "allkeys", "freshness"}
    assert list(data["crossover"]) == ["loopback"]
    assert "[loopback] coordination stall per action" in stdout


def test_bench_window_ctrl_c_at_the_terminal_spares_its_children(tmp_path: Path) -> None:
    # The whole process group gets SIGINT while the second mode's processes import or measure
    # (half a second after the first mode's line: past the instant they are started).
    out = tmp_path / "partial.json"
    argv = ["window", "--quick", "--out", str(out)]
    code, stdout, err, tmpdir, marker = interrupt(
        argv, tmp_path, "bench window:", 1, terminal=True, later_s=0.5
    )
    assert_clean_exit(code, err, tmpdir, marker)

    data = json.loads(out.read_text())
    assert data["interrupted"] is True
    assert 1 <= len(data["rows"]) < 3 and data["rows"][0]["mode"] == "gate"
    assert data["rows"][0]["actions"] > 0
    assert "interrupted: the results above are what was measured before Ctrl-C" in stdout
    assert "gate only" in stdout
