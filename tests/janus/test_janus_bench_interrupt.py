"""Ctrl-C during `planfence bench janus` with worker processes: the seeds finished so far are
printed and written, no traceback, exit 130, and no worker is left behind."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

from interrupts import interruptible


def processes_with(marker: str) -> list[int]:
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


def test_interrupted_parallel_run_keeps_the_finished_seeds(tmp_path: Path) -> None:
    out = tmp_path / "partial.json"
    marker = f"planfence-janus-interrupt-{uuid.uuid4().hex}"
    argv = ["bench", "janus", "--seeds", "8", "--rho", "0.8", "--steps", "60"]
    argv += ["--encoder", "hashing", "--jobs", "2", "--out", str(out)]
    proc = subprocess.Popen(
        interruptible([sys.executable, "-m", "planfence.adapters.cli", *argv]),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "PLANFENCE_INTERRUPT_TEST": marker},
        cwd=tmp_path,
    )
    try:
        assert proc.stderr is not None
        first = proc.stderr.readline()
        assert first.startswith("bench janus: "), first
        proc.send_signal(signal.SIGINT)
        stdout, rest = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    err = first + rest
    assert proc.returncode == 130, err
    assert "Traceback" not in err and "KeyboardInterrupt" not in err, err
    assert "interrupted" in stdout
    doc = json.loads(out.read_text())
    assert doc["interrupted"] is True
    seeds = {r["seed"] for r in doc["rows"]}
    assert seeds and len(seeds) < 8
    # Written in the documented order, whatever order the workers finished in: R by R, rho by
    # rho, seed by seed (two seeds finished before the Ctrl-C come as R0: s0 s1, R0.3: s0 s1...).
    order = [(r["eval_redraw"], r["rho"], r["seed"]) for r in doc["rows"]]
    assert order == sorted(order)
    # Each stream kept is whole: every strategy of it, once.
    streams: dict[tuple[float, float, int], list[str]] = {}
    for r in doc["rows"]:
        streams.setdefault((r["eval_redraw"], r["rho"], r["seed"]), []).append(r["strategy"])
    strategies = sorted(next(iter(streams.values())))
    assert len(strategies) == len(set(strategies)) > 1
    assert all(sorted(names) == strategies for names in streams.values()), streams
    deadline = time.monotonic() + 10
    while processes_with(marker) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert processes_with(marker) == []
