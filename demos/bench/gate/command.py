"""`planfence bench gate`: options and the run (see the package docstring)."""

from __future__ import annotations

import argparse
import asyncio
import secrets
from contextlib import AsyncExitStack
from typing import Any

from planfence.adapters.cli.common import add_output
from planfence.adapters.owner_service import Keyring
from planfence.demos.bench.harness.options import add_bench_store, add_quick, add_repeat, pick
from planfence.demos.bench.harness.output import new_results, run_bench
from planfence.demos.bench.harness.stores import (
    check_store,
    extra_postgres,
    open_bench_store,
    open_extra_postgres,
)
from planfence.demos.support import Progress
from planfence.shared_memory import open_async_store
from planfence.shared_memory.factory import sqlite_on_loop

from ..harness.owners import OWNERS, REQUESTER, owner_services
from ..harness.scratch import scratch_folder
from .cases import seed_latency, seed_traffic
from .measure import http_rows, store_rows, traffic
from .otel import otel_rows
from .peer import peer_rows, peer_steps
from .report import LOOP_ROWS, print_tables
from .signing import signing_rows

HELP = "gate allow-path latency vs a bare head read, and head traffic vs the all-key check"

REPEAT, QUICK_REPEAT = 150, 5
TRAFFIC_REPEAT, QUICK_TRAFFIC_REPEAT = 10, 2


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_quick(parser, f"{QUICK_REPEAT} timed checks per row")
    add_repeat(parser, REPEAT, QUICK_REPEAT, "timed checks per latency row")
    add_bench_store(parser, postgres_too=True)
    add_output(parser)


def run(args: argparse.Namespace) -> int:
    repeat = pick(args.repeat, args.quick, REPEAT, QUICK_REPEAT)
    traffic_repeat = QUICK_TRAFFIC_REPEAT if args.quick else TRAFFIC_REPEAT
    main_url = args.store
    extra_pg = extra_postgres(args.store)
    check_store(main_url, shared=True)
    results = new_results(
        repeat=repeat,
        traffic_repeat=traffic_repeat,
        stores=[],
        notes=[],
        rows=[],
        traffic=[],
        telemetry=[],
        signing=[],
        peer=[],
    )

    def measure() -> None:
        asyncio.run(_bench(results, repeat, traffic_repeat, main_url, extra_pg))

    return run_bench(args, results, measure, print_tables)


async def _bench(
    results: dict[str, Any],
    repeat: int,
    traffic_repeat: int,
    main_url: str | None,
    extra_pg: str | None,
) -> None:
    """Fill `results` in as rows are measured. Every store, folder and process is released on
    the way out, also when the run is cancelled by Ctrl-C."""
    keyring_text = {a: secrets.token_hex(24) for a in (*OWNERS, REQUESTER)}
    keyring = Keyring(keyring_text, source="<bench>")
    rows, traffic_rows = results["rows"], results["traffic"]
    async with AsyncExitStack() as stack:
        target, store = await open_bench_store(stack, main_url, results)
        logs = stack.enter_context(scratch_folder())
        policy, cases = await seed_latency(store)
        policy, traffic_cases = await seed_traffic(store, policy)
        directory = stack.enter_context(owner_services(target.url, keyring_text, logs))
        pg = None if extra_pg is None else await open_extra_postgres(extra_pg, results, stack)
        sources = 2 + (pg is not None)
        otel_cases = [c for c in cases if c.deps == 4]
        # The same SQLite file with its calls on the event loop, as the MCP servers open it.
        loop_cases = cases if target.backend == "sqlite" else []
        steps = sources * len(cases) + len(traffic_cases) + len(otel_cases) + len(loop_cases)
        progress = stack.enter_context(Progress("bench gate", steps + peer_steps()))
        await store_rows(target.backend, store, policy, cases, repeat, rows, progress)
        if loop_cases:
            on_loop = await open_async_store(sqlite_on_loop(target.url))
            stack.push_async_callback(on_loop.aclose)
            await store_rows(LOOP_ROWS, on_loop, policy, loop_cases, repeat, rows, progress)
        await peer_rows(repeat, results["peer"], results["notes"], progress)
        await otel_rows(
            store, policy, otel_cases, repeat, results["telemetry"], results["notes"], progress
        )
        results["signing"] = await signing_rows(repeat)
        if pg is not None:
            pg_policy, pg_cases = await seed_latency(pg)
            await store_rows("postgres", pg, pg_policy, pg_cases, repeat, rows, progress)
        await http_rows(store, policy, cases, repeat, directory, keyring, rows, progress)
        await traffic(
            store, policy, traffic_cases, traffic_repeat, directory, keyring, traffic_rows, progress
        )
