"""The two measurements of `bench link`: gate checks through the link (planfence vs the all-key
check) and one authenticated head sync on a fresh connection, each interleaved in rounds."""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import httpx

from planfence.adapters.owner_service import Keyring
from planfence.demos.baselines import store_key_space
from planfence.demos.bench.harness.stats import percentile, rotate
from planfence.demos.executors import Wiring, build_executor, flush_audit
from planfence.demos.support import Progress
from planfence.plugins.gate import ALLOW, Policy, ToolCall
from planfence.shared_memory import AsyncStore

from ..harness.owners import OWNERS, REQUESTER, plan_at_depth, seed_keys
from ..harness.wire import CountedOwnerHeads

KEY_SPACES = (8, 32, 128)
DEPS = (1, 4)
SYNC_KIB = (1, 4, 16, 64)


@dataclass(frozen=True)
class GateCase:
    keys: int
    deps: int
    tool: str
    plan: str


@dataclass
class Samples:
    seconds: list[float] = field(default_factory=list)
    bytes: int = 0
    checks: int = 0


async def seed_gate_cases(store: AsyncStore) -> tuple[Policy, list[GateCase]]:
    policy = Policy()
    cases = []
    for n in KEY_SPACES:
        facts = await seed_keys(store, f"t{n}", n)
        keys = [f"t{n}/k{i:03d}" for i in range(n)]
        for deps in DEPS:
            tool = f"link_{n}_{deps}"
            policy = policy.declare(tool, keys[:deps])
            plan = await plan_at_depth(store, facts[:deps], 1, f"link-{n}-{deps}")
            cases.append(GateCase(n, deps, tool, plan))
    return policy, cases


GATE_WARMUP = 2
SYNC_WARMUP = 1


async def gate_rows(
    store: AsyncStore,
    policy: Policy,
    cases: list[GateCase],
    directories: Mapping[str, Mapping[str, str]],
    keyring: Keyring,
    repeat: int,
    out: list[dict[str, Any]],
    progress: Progress,
) -> None:
    """Every (path, method) pair checks every case once per round, in rotating order. The rows
    go to `out` when the rounds end, also when they are cut short (Ctrl-C): then they hold the
    rounds that completed."""
    combos = [(path, method) for path in directories for method in ("planfence", "allkeys")]
    https = {
        combo: CountedOwnerHeads(directories[combo[0]], keyring, agent=REQUESTER, timeout=30.0)
        for combo in combos
    }
    spaces = {n: store_key_space(store, f"t{n}/") for n in KEY_SPACES}
    gates = {
        (path, method, n): build_executor(
            method, Wiring(store, policy, REQUESTER, heads=http, key_space=spaces[n])
        )
        for (path, method), http in https.items()
        for n in KEY_SPACES
    }
    samples = {(c.keys, c.deps, p, m): Samples() for c in cases for p, m in combos}
    try:
        for i in range(GATE_WARMUP + repeat):
            for case in cases:
                for path, method in rotate(combos, i):
                    http = https[(path, method)]
                    before = http.stats.total_bytes
                    t0 = time.perf_counter()
                    verdict = await gates[(path, method, case.keys)].check(
                        ToolCall(case.tool, {}, case.plan)
                    )
                    elapsed = time.perf_counter() - t0
                    if verdict.verdict != ALLOW:
                        raise RuntimeError(f"benchmark plan not allowed: {verdict.message}")
                    if i >= GATE_WARMUP:
                        s = samples[(case.keys, case.deps, path, method)]
                        s.seconds.append(elapsed)
                        s.bytes += http.stats.total_bytes - before
                        s.checks += 1
            what = "warm-up" if i < GATE_WARMUP else f"{i - GATE_WARMUP + 1}/{repeat}"
            progress.advance(f"gate checks, round {what}")
    finally:
        out.extend(gate_table(cases, directories, samples))
        for gate in gates.values():
            await flush_audit(gate)
        for http in https.values():
            await http.aclose()


def gate_table(
    cases: list[GateCase],
    directories: Mapping[str, Mapping[str, str]],
    samples: Mapping[tuple[int, int, str, str], Samples],
) -> list[dict[str, Any]]:
    rows = []
    for case in cases:
        for path in directories:
            mine = [samples[(case.keys, case.deps, path, m)] for m in ("planfence", "allkeys")]
            if not all(s.checks for s in mine):
                continue
            row: dict[str, Any] = {"path": path, "keys": case.keys, "deps": case.deps}
            for method, s in zip(("planfence", "allkeys"), mine, strict=True):
                row[f"{method}_p50_ms"] = round(percentile(s.seconds, 50) * 1000, 3)
                row[f"{method}_p95_ms"] = round(percentile(s.seconds, 95) * 1000, 3)
                row[f"{method}_bytes"] = round(s.bytes / s.checks)
            pf = row["planfence_p50_ms"]
            row["stall_ratio_p50"] = round(row["allkeys_p50_ms"] / pf, 3) if pf > 0 else None
            rows.append(row)
    return rows


async def seed_sync_keys(store: AsyncStore, n: int) -> list[str]:
    """n keys owned by the first owner, short names so the answer grows faster than the ask."""
    keys = [f"s/{i:05d}" for i in range(n)]
    for i, key in enumerate(keys):
        await store.own(key, OWNERS[0])
        await store.put(key, {"i": i}, author=OWNERS[0])
    return keys


def sync_heads(url: str, keyring: Keyring) -> CountedOwnerHeads:
    # no keep-alive: every sync opens its own TCP connection
    return CountedOwnerHeads(
        {OWNERS[0]: url},
        keyring,
        agent=REQUESTER,
        timeout=60.0,
        limits=httpx.Limits(max_keepalive_connections=0),
    )


async def one_sync(heads: CountedOwnerHeads, keys: tuple[str, ...]) -> tuple[float, int, int]:
    sent, received = heads.stats.bytes_sent, heads.stats.bytes_received
    t0 = time.perf_counter()
    answers = await heads.heads({OWNERS[0]: keys})
    elapsed = time.perf_counter() - t0
    bad = [a for a in answers.values() if a.error or a.head is None]
    if bad or len(answers) != len(keys):
        raise RuntimeError(f"owner sync failed: {bad[:1]}")
    return elapsed, heads.stats.bytes_sent - sent, heads.stats.bytes_received - received


async def sync_rows(
    keys: list[str],
    urls: Mapping[str, str],
    losses: Mapping[str, float],
    keyring: Keyring,
    repeat: int,
    out: list[dict[str, Any]],
    progress: Progress,
) -> None:
    """Answer sizes picked from a two-point fit of answer bytes per key; then every path syncs
    every size once per round, in rotating order. Rows go to `out` as in `gate_rows`."""
    paths = list(urls)
    clients = {p: sync_heads(urls[p], keyring) for p in paths}
    samples: dict[tuple[int, str], list[float]] = {(k, p): [] for k in SYNC_KIB for p in paths}
    size: dict[int, tuple[int, int]] = {}
    counts: dict[int, int] = {}
    try:
        loop = clients[paths[0]]
        _, _, one = await one_sync(loop, tuple(keys[:1]))
        _, _, hundred = await one_sync(loop, tuple(keys[:100]))
        per_key = (hundred - one) / 99
        counts.update(
            (kib, max(1, min(len(keys), 1 + round((kib * 1024 - one) / per_key))))
            for kib in SYNC_KIB
        )
        for i in range(SYNC_WARMUP + repeat):
            for kib in SYNC_KIB:
                for path in rotate(paths, i + kib):
                    elapsed, sent, received = await one_sync(
                        clients[path], tuple(keys[: counts[kib]])
                    )
                    size[kib] = (sent, received)
                    if i >= SYNC_WARMUP:
                        samples[(kib, path)].append(elapsed)
            what = "warm-up" if i < SYNC_WARMUP else f"{i - SYNC_WARMUP + 1}/{repeat}"
            progress.advance(f"head syncs, round {what}")
    finally:
        for heads in clients.values():
            await heads.aclose()
        for kib in SYNC_KIB:
            for path in paths:
                s = samples[(kib, path)]
                if not s:
                    continue
                out.append(
                    {
                        "path": path,
                        "loss": losses[path],
                        "state_kib": kib,
                        "keys": counts[kib],
                        "request_bytes": size[kib][0],
                        "answer_bytes": size[kib][1],
                        "p50_ms": round(percentile(s, 50) * 1000, 3),
                        "p95_ms": round(percentile(s, 95) * 1000, 3),
                    }
                )
