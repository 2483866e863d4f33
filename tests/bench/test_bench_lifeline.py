"""A benchmark that is killed (SIGKILL: no chance to clean up) leaves nothing running: its owner
services and worker processes watch it and stop once it is gone. The temporary folder it could
not remove is removed by the next benchmark that starts, and a running benchmark's folder is
never touched."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

from test_bench_interrupt import processes_with

from planfence.demos.bench.harness import scratch

HERE = Path(__file__).parent
GONE_WAIT_S = 60.0  # a generous bound for the children to notice; they are usually gone at once
NO_POSTGRES = "postgresql://postgres@127.0.0.1:1/test"  # nothing listens on port 1

SERVICES_PARENT = """
import sys, time
from pathlib import Path
from planfence.demos.bench.harness import services
specs = {name: services.Service("test_bench_services:health_app") for name in ("a", "b")}
with services.running(specs, Path(sys.argv[1])) as urls:
    print("ready", *urls.values(), flush=True)
    time.sleep(600)
"""

WORKER_PARENT = """
import multiprocessing, sys, time
from planfence.demos.bench.harness.children import ctrl_c_spares_children
from planfence.demos.bench.window.workers import Setup, owner_main
if __name__ == "__main__":
    ctx = multiprocessing.get_context("spawn")
    ready, go, out = ctx.Semaphore(0), ctx.Event(), ctx.Queue()
    setup = Setup(sys.argv[1], "gate", ("window/gate/item/0",), 1, 100, 5.0, 1.0)
    owner = ctx.Process(target=owner_main, args=(setup, ready, go, out), daemon=True)
    with ctrl_c_spares_children():
        owner.start()
    assert ready.acquire(timeout=120)
    print("ready", flush=True)
    time.sleep(600)
"""


def start(argv: list[str], marker: str, tmp_path: Path, **env: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        argv,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=tmp_path,
        env={**os.environ, "PLANFENCE_LIFELINE_TEST": marker, **env},
    )


def kill(proc: subprocess.Popen[str]) -> None:
    """SIGKILL: the process ends at once, without running any code of its own."""
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=30)
    for stream in (proc.stdout, proc.stderr):  # a child left running may still hold them
        if stream is not None:
            stream.close()


def wait_for_locked_folder(
    proc: subprocess.Popen[str], tmpdir: Path, known: set[Path], timeout: float = 120
) -> Path:
    """The new folder `proc` made in `tmpdir`, once it holds its lock file: the benchmark has
    set up, and its folder is now one the next benchmark must either keep or sweep."""
    deadline = time.monotonic() + timeout
    while True:
        made = [p for p in tmpdir.iterdir() if p not in known and (p / scratch.LOCK).is_file()]
        if made:
            assert len(made) == 1, made
            return made[0]
        if proc.poll() is not None:
            err = proc.stderr.read() if proc.stderr else ""
            raise AssertionError(f"the benchmark ended before it was killed: {err}")
        assert time.monotonic() < deadline, f"no locked folder in {tmpdir} after {timeout} s"
        time.sleep(0.02)


def wait_until_gone(marker: str) -> list[int]:
    deadline = time.monotonic() + GONE_WAIT_S
    while processes_with(marker) and time.monotonic() < deadline:
        time.sleep(0.1)
    return processes_with(marker)


def test_owner_services_stop_when_the_benchmark_is_killed(tmp_path: Path) -> None:
    marker = f"planfence-lifeline-{uuid.uuid4().hex}"
    argv = [sys.executable, "-c", SERVICES_PARENT, str(tmp_path)]
    proc = start(argv, marker, tmp_path, PYTHONPATH=str(HERE))
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        assert line.startswith("ready "), line + (proc.stderr.read() if proc.stderr else "")
        assert len(processes_with(marker)) == 3  # the parent and its two services
        kill(proc)
        assert wait_until_gone(marker) == []
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_worker_processes_stop_when_the_benchmark_is_killed(tmp_path: Path) -> None:
    # `bench window`'s owner process, started as the benchmark starts it, is waiting for the
    # common start when the benchmark is killed: nobody will ever start it.
    marker = f"planfence-lifeline-{uuid.uuid4().hex}"
    argv = [sys.executable, "-c", WORKER_PARENT, f"sqlite:///{tmp_path / 'store.db'}"]
    proc = start(argv, marker, tmp_path)
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        assert line.startswith("ready"), line + (proc.stderr.read() if proc.stderr else "")
        kill(proc)
        assert wait_until_gone(marker) == []
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_the_next_benchmark_removes_a_killed_ones_folder(tmp_path: Path) -> None:
    tmpdir = tmp_path / "tmp"
    tmpdir.mkdir()
    (tmpdir / "planfence-bench-not-ours").mkdir()  # no lock file: someone else's, kept
    marker = f"planfence-lifeline-{uuid.uuid4().hex}"
    bench = [sys.executable, "-m", "planfence.adapters.cli", "bench", "store", "--warmup", "0"]
    # SQLite only (the PostgreSQL row is skipped with a note): the folders are the point here.
    env = {"TMPDIR": str(tmpdir), "PLANFENCE_BENCH_POSTGRES_URL": NO_POSTGRES}
    killed = start([*bench, "--repeat", "100000"], marker, tmp_path, **env)
    try:
        wait_for_locked_folder(killed, tmpdir, set(tmpdir.iterdir()))
        kill(killed)
    finally:
        if killed.poll() is None:
            killed.kill()
            killed.wait()
    left = sorted(p.name for p in tmpdir.iterdir())
    assert len(left) == 2  # the killed benchmark's folder is still there

    # A benchmark still running keeps its folder while the next one starts.
    running = start([*bench, "--repeat", "100000"], marker, tmp_path, **env)
    try:
        mine = {wait_for_locked_folder(running, tmpdir, {tmpdir / name for name in left})}
        done = subprocess.run(
            [*bench, "--repeat", "1"],
            capture_output=True,
            text=True,
            cwd=tmp_path,
            env={**os.environ, **env},
            timeout=120,
        )
        assert done.returncode == 0, done.stderr
        assert set(tmpdir.iterdir()) == mine | {tmpdir / "planfence-bench-not-ours"}
    finally:
        kill(running)
    assert scratch.sweep(tmpdir) == list(mine)


def test_every_temporary_folder_of_a_benchmark_is_a_scratch_folder() -> None:
    bench = Path(scratch.__file__).parent.parent
    for source in bench.rglob("*.py"):
        if source.name == "scratch.py":
            continue
        text = source.read_text()
        for making_one in ("TemporaryDirectory(", "mkdtemp("):
            assert making_one not in text, f"{source}: use harness.scratch ({making_one})"
