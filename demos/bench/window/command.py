"""`planfence bench window`: options and the run (see the package docstring)."""

from __future__ import annotations

import argparse
import asyncio
import multiprocessing
import time
from collections.abc import Callable
from contextlib import AsyncExitStack
from queue import Empty
from typing import Any

from planfence.adapters.cli.common import add_output, positive_int
from planfence.demos.bench.harness.children import ctrl_c_spares_children
from planfence.demos.bench.harness.options import add_bench_store, add_quick, non_negative_float
from planfence.demos.bench.harness.output import new_results, run_bench
from planfence.demos.bench.harness.stats import percentile
from planfence.demos.bench.harness.stores import check_store, open_bench_store
from planfence.demos.support import Progress
from planfence.shared_memory import AsyncStore

from .judge import judge_history
from .report import print_table
from .workers import (
    MODES,
    OWNER,
    Setup,
    data_key,
    effects_key,
    executor_main,
    executor_name,
    owner_main,
)

HELP = "effects on a stale head: the gate alone vs fencing tokens vs head leases"

EXECUTORS, QUICK_EXECUTORS = 3, 2
SECONDS, QUICK_SECONDS = 4.0, 1.0
KEYS = 2
START_TIMEOUT_S = 120.0
POLL_S = 0.1


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_quick(parser, f"{QUICK_EXECUTORS} executors, {QUICK_SECONDS:g} s per mode")
    parser.add_argument(
        "--executors",
        type=positive_int,
        default=None,
        metavar="N",
        help=f"executor processes (default: {EXECUTORS}; {QUICK_EXECUTORS} with --quick)",
    )
    parser.add_argument(
        "--seconds",
        type=non_negative_float,
        default=None,
        metavar="S",
        help=f"run time per mode (default: {SECONDS:g}; {QUICK_SECONDS:g} with --quick)",
    )
    parser.add_argument(
        "--tool-ms", type=positive_int, default=20, metavar="MS", help="the tool's run time"
    )
    parser.add_argument(
        "--lease-ms",
        type=positive_int,
        default=2000,
        metavar="MS",
        help="lease_ms of the tool in the lease mode (default: 2000)",
    )
    parser.add_argument(
        "--owner-interval-ms",
        type=non_negative_float,
        default=2.0,
        metavar="MS",
        help="pause between the owner's head advances (default: 2)",
    )
    add_bench_store(parser)
    add_output(parser)


def run(args: argparse.Namespace) -> int:
    check_store(args.store, shared=True)
    executors = args.executors or (QUICK_EXECUTORS if args.quick else EXECUTORS)
    seconds = (
        args.seconds if args.seconds is not None else (QUICK_SECONDS if args.quick else SECONDS)
    )
    results = new_results(
        executors=executors,
        seconds=seconds,
        tool_ms=args.tool_ms,
        lease_ms=args.lease_ms,
        owner_interval_ms=args.owner_interval_ms,
        stores=[],
        notes=[],
        rows=[],
    )

    def measure() -> None:
        asyncio.run(_bench(results, args, executors, seconds))

    return run_bench(args, results, measure, print_table)


async def _bench(
    results: dict[str, Any], args: argparse.Namespace, executors: int, seconds: float
) -> None:
    async with AsyncExitStack() as stack:
        target, store = await open_bench_store(stack, args.store, results)
        progress = stack.enter_context(Progress("bench window", len(MODES)))
        for mode in MODES:
            setup = Setup(
                url=target.url,
                mode=mode,
                keys=tuple(data_key(mode, i) for i in range(KEYS)),
                tool_ms=args.tool_ms,
                lease_ms=args.lease_ms,
                owner_interval_ms=args.owner_interval_ms,
                seconds=seconds,
            )
            await _seed(store, setup, executors)
            reports = await _run_processes(setup, executors)
            results["rows"].append(await _row(store, setup, reports))
            progress.advance(f"{mode}: done")


async def _seed(store: AsyncStore, setup: Setup, executors: int) -> None:
    for key in setup.keys:
        await store.own(key, OWNER)
        await store.put(key, {"n": 0}, author=OWNER)
    for n in range(executors):
        await store.own(effects_key(setup.mode, n), executor_name(n))


async def _run_processes(setup: Setup, executors: int) -> list[tuple[str, int, dict[str, Any]]]:
    """Spawn the owner and the executors, start them together, collect their reports. The
    children ignore Ctrl-C (`ctrl_c_spares_children`); the waits here poll in short steps, so a
    Ctrl-C (the run cancelled) ends them at once, and every process is ended on the way out."""
    ctx = multiprocessing.get_context("spawn")
    ready, go, out = ctx.Semaphore(0), ctx.Event(), ctx.Queue()
    procs = [ctx.Process(target=owner_main, args=(setup, ready, go, out), daemon=True)]
    procs += [
        ctx.Process(target=executor_main, args=(setup, n, ready, go, out), daemon=True)
        for n in range(executors)
    ]
    try:
        with ctrl_c_spares_children():
            for p in procs:
                p.start()
        for _ in procs:
            await _poll(procs, lambda t: ready.acquire(timeout=t), START_TIMEOUT_S, "start")
        go.set()
        reports = []
        for _ in procs:
            got = await _poll(procs, lambda t: _get(out, t), setup.seconds + START_TIMEOUT_S, "end")
            reports.append(got)
        for p in procs:
            await asyncio.to_thread(p.join, 30)
        return reports
    finally:
        for p in procs:
            if p.is_alive():
                p.terminate()
        for p in procs:
            if p.pid is not None:
                p.join(timeout=5)


def _get(queue: Any, timeout: float) -> Any:
    try:
        return queue.get(timeout=timeout)
    except Empty:
        return None


async def _poll(procs: list[Any], wait: Callable[[float], Any], limit: float, what: str) -> Any:
    """`wait(POLL_S)` in a thread until it returns something truthy: at most POLL_S between two
    chances to be cancelled, and a process that died on the way fails the run at once."""
    deadline = time.monotonic() + limit
    while True:
        got = await asyncio.to_thread(wait, POLL_S)
        if got:
            return got
        dead = [p for p in procs if p.exitcode not in (None, 0)]
        if dead:
            raise RuntimeError(f"a bench window process exited with status {dead[0].exitcode}")
        if time.monotonic() > deadline:
            raise RuntimeError(f"a bench window process did not {what} within {limit:g} s")


async def _row(
    store: AsyncStore, setup: Setup, reports: list[tuple[str, int, dict[str, Any]]]
) -> dict[str, Any]:
    judged = await judge_history(store, setup.mode)
    waits = [w for kind, _, r in reports if kind == "owner" for w in r["waits_s"]]
    counts = [r for kind, _, r in reports if kind == "executor"]
    ms = [w * 1000 for w in waits]
    return {
        "mode": setup.mode,
        "actions": sum(c["actions"] for c in counts),
        "effects": judged.effects,
        "effects_on_stale": judged.on_stale,
        "owner_wait_p50_ms": round(percentile(ms, 50), 3) if ms else None,
        "owner_wait_p99_ms": round(percentile(ms, 99), 3) if ms else None,
        "owner_advances": len(waits),
        "refused_by_gate": sum(c["refused"] for c in counts),
        "refused_by_fence": sum(c["fence_refused"] for c in counts),
    }
