"""`planfence bench gate`: what the gate costs on the allow path, and what it sends.

Latency: `Gate.check` on plans that are current (the allow path, audit on, as shipped) for
|D(a)| = 1, 4, 16 and lineage depth 1, 10, 100, with heads from the store (SQLite, PostgreSQL) and
from owner services over loopback HTTP. Each check is interleaved with a bare read of the same
heads (`store.states(keys)`, or the signed HTTP head requests alone); `ratio_p50` is the allow
path's median over the bare read's.

Depth N: the plan sits N derived records above the facts (1: the plan cites the facts; 10: it
cites a chain of 9 intermediate derived records, the lowest of which cites the facts).

Traffic: bytes on the wire per validation (HTTP/1.1 request and answer, headers included) when
the gate asks owners for D(a) only, versus the batch all-key check (every shared key), for key
spaces of 8, 32 and 128 keys.

Stores: a temporary SQLite file (it also backs the owner services), plus PostgreSQL rows in a
throwaway schema on the server at $PLANFENCE_BENCH_POSTGRES_URL (skipped with a note when none
answers). With `--store URL`, that backend alone, in a throwaway file or schema at that place.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import secrets
import tempfile
import time
from collections.abc import Awaitable, Callable, Iterator, Mapping
from contextlib import AsyncExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from planfence.adapters.cli.common import add_output
from planfence.adapters.owner_service import HttpOwnerHeads, Keyring
from planfence.demos.baselines import AllKeysHeads, store_key_space
from planfence.plugins.gate import (
    ALLOW,
    Gate,
    HeadSource,
    Policy,
    create_plan,
)
from planfence.shared_memory import AsyncStore, PlanFenceError, open_async_store

from .._support import Progress
from . import services
from .common import (
    BENCH_PG_ENV,
    DEFAULT_PG_URL,
    add_bench_store,
    add_quick,
    add_repeat,
    bench_store,
    check_store,
    new_results,
    percentile,
    pick,
    print_context,
    run_bench,
)
from .wire import CountedOwnerHeads

HELP = "gate allow-path latency vs a bare head read, and head traffic vs the all-key check"

DEPS = (1, 4, 16)
DEPTHS = (1, 10, 100)
KEY_SPACES = (8, 32, 128)
OWNERS = ("owner-a", "owner-b")
REQUESTER = "executor"
REPEAT, QUICK_REPEAT = 150, 5
TRAFFIC_REPEAT, QUICK_TRAFFIC_REPEAT = 10, 2


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_quick(parser, f"{QUICK_REPEAT} timed checks per row")
    add_repeat(parser, REPEAT, QUICK_REPEAT, "timed checks per latency row")
    add_bench_store(
        parser, f"a temporary SQLite file, and PostgreSQL at ${BENCH_PG_ENV} or {DEFAULT_PG_URL}"
    )
    add_output(parser)


def run(args: argparse.Namespace) -> int:
    repeat = pick(args.repeat, args.quick, REPEAT, QUICK_REPEAT)
    traffic_repeat = QUICK_TRAFFIC_REPEAT if args.quick else TRAFFIC_REPEAT
    main_url = args.store
    extra_pg = None if args.store is not None else os.environ.get(BENCH_PG_ENV) or DEFAULT_PG_URL
    check_store(main_url, shared=True)
    results = new_results(
        repeat=repeat, traffic_repeat=traffic_repeat, stores=[], notes=[], rows=[], traffic=[]
    )

    def measure() -> None:
        asyncio.run(_bench(results, repeat, traffic_repeat, main_url, extra_pg))

    return run_bench(args, results, measure, _print_tables)


# ---- the team the benchmark runs against


@dataclass(frozen=True)
class Case:
    tool: str
    deps: int
    depth: int
    plan: str
    owners: dict[str, tuple[str, ...]]  # owner -> keys of D(a), as the gate groups them
    space: int = 0  # size of the shared key space (traffic cases)

    @property
    def keys(self) -> list[str]:
        return [k for ks in self.owners.values() for k in ks]


def _owner_of(i: int) -> str:
    return OWNERS[i % len(OWNERS)]


async def _seed_keys(store: AsyncStore, prefix: str, n: int) -> list[str]:
    """n owned keys under `prefix`, owners alternating, one fact each; their record ids."""
    facts = []
    for i in range(n):
        key = f"{prefix}/k{i:03d}"
        await store.own(key, _owner_of(i))
        facts.append((await store.put(key, {"i": i}, author=_owner_of(i))).id)
    return facts


async def _plan_at_depth(store: AsyncStore, facts: list[str], depth: int, tag: str) -> str:
    parents = facts
    for level in range(depth - 1):
        note = await store.add(
            f"bench/derived/{tag}",
            {"level": level},
            author=OWNERS[0],
            parents=parents,
            kind="derived",
        )
        parents = [note.id]
    return (await create_plan(store, author=OWNERS[0], parents=parents, value={"tag": tag})).id


def _grouped(keys: list[str]) -> dict[str, tuple[str, ...]]:
    out: dict[str, list[str]] = {}
    for key in keys:
        out.setdefault(_owner_of(int(key.rsplit("k", 1)[1])), []).append(key)
    return {o: tuple(sorted(ks)) for o, ks in sorted(out.items())}


async def _seed_latency(store: AsyncStore) -> tuple[Policy, list[Case]]:
    keys = [f"lat/k{i:03d}" for i in range(max(DEPS))]
    facts = await _seed_keys(store, "lat", max(DEPS))
    policy = Policy()
    cases = []
    for deps in DEPS:
        tool = f"act_{deps}"
        policy = policy.declare(tool, keys[:deps])
        for depth in DEPTHS:
            plan = await _plan_at_depth(store, facts[:deps], depth, f"lat-{deps}-{depth}")
            cases.append(Case(tool, deps, depth, plan, _grouped(keys[:deps])))
    return policy, cases


async def _seed_traffic(store: AsyncStore, policy: Policy) -> tuple[Policy, list[Case]]:
    cases = []
    for n in KEY_SPACES:
        facts = await _seed_keys(store, f"t{n}", n)
        keys = [f"t{n}/k{i:03d}" for i in range(n)]
        for deps in (d for d in DEPS if d < n):
            tool = f"traffic_{n}_{deps}"
            policy = policy.declare(tool, keys[:deps])
            plan = await _plan_at_depth(store, facts[:deps], 1, f"t{n}-{deps}")
            cases.append(Case(tool, deps, 1, plan, _grouped(keys[:deps]), space=n))
    return policy, cases


# ---- owner services on loopback


@contextmanager
def _owner_services(
    store_url: str, keyring: Mapping[str, str], logs: Path
) -> Iterator[dict[str, str]]:
    """One owner service process per owner over `store_url`; yields owner -> base URL."""
    specs = {owner: services.owner_service(owner, store_url, keyring) for owner in OWNERS}
    with services.running(specs, logs) as urls:
        yield urls


# ---- measurement


async def _measure(
    gate: Gate,
    case: Case,
    bare: Callable[[], Awaitable[object]],
    iterations: int,
) -> dict[str, Any]:
    """Interleave allow-path checks (audited, as shipped, and without the audit write) with bare
    reads; alternate which goes first."""
    allow_s: list[float] = []
    quiet_s: list[float] = []
    bare_s: list[float] = []
    quiet = Gate(
        gate.store,
        gate.policy,
        heads=gate.head_source,
        max_records=gate.max_records,
        audit=False,
        agent=gate.agent,
    )

    async def one_check() -> None:
        for g, samples in ((gate, allow_s), (quiet, quiet_s)):
            t0 = time.perf_counter()
            verdict = await g.check(case.tool, {}, case.plan)
            samples.append(time.perf_counter() - t0)
            if verdict.verdict != ALLOW:
                raise RuntimeError(
                    f"benchmark plan was not allowed: {verdict.reason} {verdict.message}"
                )

    async def one_read() -> None:
        t0 = time.perf_counter()
        await bare()
        bare_s.append(time.perf_counter() - t0)

    warmup = max(2, iterations // 10)
    for i in range(warmup + iterations):
        if i % 2:
            await one_check()
            await one_read()
        else:
            await one_read()
            await one_check()
        if i == warmup - 1:
            allow_s.clear()
            quiet_s.clear()
            bare_s.clear()
    allow_p50 = percentile(allow_s, 50) * 1000
    quiet_p50 = percentile(quiet_s, 50) * 1000
    bare_p50 = percentile(bare_s, 50) * 1000
    return {
        "deps": case.deps,
        "depth": case.depth,
        "allow_p50_ms": round(allow_p50, 4),
        "allow_p99_ms": round(percentile(allow_s, 99) * 1000, 4),
        "bare_read_p50_ms": round(bare_p50, 4),
        "ratio_p50": round(allow_p50 / bare_p50, 3) if bare_p50 > 0 else None,
        "no_audit_p50_ms": round(quiet_p50, 4),
        "no_audit_ratio_p50": round(quiet_p50 / bare_p50, 3) if bare_p50 > 0 else None,
    }


def _label(row: Mapping[str, Any]) -> str:
    return f"{row['heads_from']} |D(a)|={row['deps']} depth {row['depth']}"


async def _store_rows(
    name: str,
    store: AsyncStore,
    policy: Policy,
    cases: list[Case],
    repeat: int,
    rows: list[dict[str, Any]],
    progress: Progress,
) -> None:
    gate = Gate(store, policy, agent=REQUESTER)
    for case in cases:
        keys = case.keys

        async def bare(keys: list[str] = keys) -> object:
            return await store.states(keys)

        rows.append({"heads_from": name, **await _measure(gate, case, bare, repeat)})
        progress.advance(_label(rows[-1]))


async def _http_rows(
    store: AsyncStore,
    policy: Policy,
    cases: list[Case],
    repeat: int,
    directory: dict[str, str],
    keyring: Keyring,
    rows: list[dict[str, Any]],
    progress: Progress,
) -> None:
    heads = HttpOwnerHeads(directory, keyring, agent=REQUESTER, timeout=10.0)
    gate = Gate(store, policy, heads=heads, agent=REQUESTER)
    try:
        for case in cases:
            owners = case.owners

            async def bare(owners: dict[str, tuple[str, ...]] = owners) -> object:
                answers = await heads.heads(owners)
                if any(a.error for a in answers.values()):
                    raise RuntimeError(f"owner refused the benchmark: {answers}")
                return answers

            rows.append({"heads_from": "http", **await _measure(gate, case, bare, repeat)})
            progress.advance(_label(rows[-1]))
    finally:
        await gate.aclose()


async def _traffic(
    store: AsyncStore,
    policy: Policy,
    cases: list[Case],
    repeat: int,
    directory: dict[str, str],
    keyring: Keyring,
    rows: list[dict[str, Any]],
    progress: Progress,
) -> None:
    for case in cases:
        n = case.space
        per: dict[str, int] = {}
        for label in ("planfence", "allkeys"):
            http = CountedOwnerHeads(directory, keyring, agent=REQUESTER, timeout=10.0)
            source: HeadSource = http
            if label == "allkeys":
                source = AllKeysHeads(http, store_key_space(store, f"t{n}/"))
            gate = Gate(store, policy, heads=source, agent=REQUESTER)
            try:
                for _ in range(repeat):
                    verdict = await gate.check(case.tool, {}, case.plan)
                    if verdict.verdict != ALLOW:
                        raise RuntimeError(f"traffic plan not allowed: {verdict.message}")
            finally:
                await gate.aclose()
            per[label] = round(http.stats.total_bytes / repeat)
        rows.append(
            {
                "keys": n,
                "deps": case.deps,
                "planfence_bytes": per["planfence"],
                "allkeys_bytes": per["allkeys"],
            }
        )
        progress.advance(f"traffic {n} keys |D(a)|={case.deps}")


async def _extra_postgres(
    url: str, results: dict[str, Any], stack: AsyncExitStack
) -> AsyncStore | None:
    """The default run's PostgreSQL store in a throwaway schema (removed when `stack` closes),
    or None and a note when no server answers."""
    target = bench_store(url, shared=False)
    stack.callback(target.cleanup)
    try:
        store = await asyncio.wait_for(open_async_store(target.url), 15)
    except (PlanFenceError, OSError, asyncio.TimeoutError) as exc:
        why = f"{type(exc).__name__}: {exc}".strip()
        results["notes"].append(f"PostgreSQL rows skipped, no server at {url} ({why})")
        return None
    stack.push_async_callback(store.aclose)
    results["stores"].append(target.describe())
    return store


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
    rows, traffic = results["rows"], results["traffic"]
    async with AsyncExitStack() as stack:
        target = bench_store(main_url, shared=True)
        stack.callback(target.cleanup)
        results["stores"].append(target.describe())
        logs = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="planfence-bench-")))
        store = await open_async_store(target.url)
        stack.push_async_callback(store.aclose)
        policy, cases = await _seed_latency(store)
        policy, traffic_cases = await _seed_traffic(store, policy)
        directory = stack.enter_context(_owner_services(target.url, keyring_text, logs))
        pg = None if extra_pg is None else await _extra_postgres(extra_pg, results, stack)
        sources = 2 + (pg is not None)
        progress = stack.enter_context(
            Progress("bench gate", sources * len(cases) + len(traffic_cases))
        )
        await _store_rows(target.backend, store, policy, cases, repeat, rows, progress)
        if pg is not None:
            pg_policy, pg_cases = await _seed_latency(pg)
            await _store_rows("postgres", pg, pg_policy, pg_cases, repeat, rows, progress)
        await _http_rows(store, policy, cases, repeat, directory, keyring, rows, progress)
        await _traffic(
            store, policy, traffic_cases, traffic_repeat, directory, keyring, traffic, progress
        )


def _print_tables(result: Mapping[str, Any]) -> None:
    print_context(result)
    print(f"{result['repeat']} timed checks per latency row")
    print("Allow-path latency of Gate.check vs a bare read of the same heads")
    print("(audited = as shipped, the decision durably recorded before the call may run;")
    print(" no audit = Gate(audit=False), the lineage check alone)")
    print(
        f"{'heads from':<10} {'|D(a)|':>6} {'depth':>5} {'allow p50':>10} {'allow p99':>10} "
        f"{'bare p50':>9} {'ratio':>6} {'no-audit p50':>12} {'ratio':>6}"
    )
    for r in result["rows"]:
        ratio = f"{r['ratio_p50']:.2f}x" if r["ratio_p50"] is not None else "-"
        quiet = r.get("no_audit_ratio_p50")
        quiet_ratio = f"{quiet:.2f}x" if quiet is not None else "-"
        print(
            f"{r['heads_from']:<10} {r['deps']:>6} {r['depth']:>5} "
            f"{r['allow_p50_ms']:>7.3f} ms {r['allow_p99_ms']:>7.3f} ms "
            f"{r['bare_read_p50_ms']:>6.3f} ms {ratio:>6} "
            f"{r['no_audit_p50_ms']:>9.3f} ms {quiet_ratio:>6}"
        )
    if not result["traffic"]:
        return
    print()
    print("Head traffic per validation (HTTP/1.1 bytes, both directions)")
    print(f"{'keys':>5} {'|D(a)|':>6} {'planfence':>10} {'all-key':>10} {'saving':>7}")
    for t in result["traffic"]:
        saving = t["allkeys_bytes"] / t["planfence_bytes"] if t["planfence_bytes"] else 0.0
        print(
            f"{t['keys']:>5} {t['deps']:>6} {t['planfence_bytes']:>8} B "
            f"{t['allkeys_bytes']:>8} B {saving:>6.1f}x"
        )
