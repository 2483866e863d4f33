"""The timed part of `bench gate`: allow-path checks interleaved with bare head reads, and the
bytes per validation of planfence vs the all-key check."""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from planfence.adapters.owner_service import HttpOwnerHeads, Keyring
from planfence.demos.baselines import store_key_space
from planfence.demos.bench.harness.stats import percentile
from planfence.demos.executors import Wiring, build_executor, flush_audit
from planfence.demos.support import Progress
from planfence.plugins.gate import ALLOW, Gate, Policy, ToolCall
from planfence.shared_memory import AsyncStore

from ..harness.owners import REQUESTER
from ..harness.wire import CountedOwnerHeads
from .cases import Case


async def _measure(
    gate: Gate,
    case: Case,
    bare: Callable[[], Awaitable[object]],
    iterations: int,
) -> dict[str, Any]:
    """Interleave allow-path checks (the gate as shipped, in its default audit mode; every
    decision durably recorded before the answer; the allow's record deferred to a batch; and
    without the audit write) with bare reads; alternate which goes first."""
    allow_s: list[float] = []
    durable_s: list[float] = []
    deferred_s: list[float] = []
    quiet_s: list[float] = []
    bare_s: list[float] = []

    def variant(*audit: object) -> Gate:
        kw: dict[str, Any] = {"audit": audit[0]} if audit else {}
        return Gate(
            gate.store,
            gate.policy,
            heads=gate.head_source,
            max_records=gate.max_records,
            agent=gate.agent,
            **kw,
        )

    shipped, quiet, deferred = variant(), variant(False), variant("deferred")
    durable = _durable(variant)
    gates = ((shipped, allow_s), (durable, durable_s), (deferred, deferred_s), (quiet, quiet_s))

    unavailable = 0  # checks blocked because the audit log could not keep up (fail closed)

    async def one_check() -> None:
        nonlocal unavailable
        for g, samples in gates:
            t0 = time.perf_counter()
            verdict = await g.check(ToolCall(case.tool, {}, case.plan))
            samples.append(time.perf_counter() - t0)
            if verdict.reason == "audit_unavailable":
                unavailable += 1
            elif verdict.verdict != ALLOW:
                raise RuntimeError(
                    f"benchmark plan was not allowed: {verdict.reason} {verdict.message}"
                )

    async def one_read() -> None:
        t0 = time.perf_counter()
        await bare()
        bare_s.append(time.perf_counter() - t0)

    warmup = max(2, iterations // 10)
    try:
        for i in range(warmup + iterations):
            if i % 2:
                await one_check()
                await one_read()
            else:
                await one_read()
                await one_check()
            if i == warmup - 1:
                for samples in (allow_s, durable_s, deferred_s, quiet_s, bare_s):
                    samples.clear()
    finally:  # write the queued allows, Ctrl-C included (the head source is the caller's)
        for g, _ in gates:
            if getattr(g, "deferred", None) is not None:
                await g.deferred.aclose()  # type: ignore[union-attr]
    allow_p50 = percentile(allow_s, 50) * 1000
    durable_p50 = percentile(durable_s, 50) * 1000
    deferred_p50 = percentile(deferred_s, 50) * 1000
    quiet_p50 = percentile(quiet_s, 50) * 1000
    bare_p50 = percentile(bare_s, 50) * 1000
    return {
        "deps": case.deps,
        "depth": case.depth,
        "allow_p50_ms": round(allow_p50, 4),
        "allow_p99_ms": round(percentile(allow_s, 99) * 1000, 4),
        "bare_read_p50_ms": round(bare_p50, 4),
        "ratio_p50": round(allow_p50 / bare_p50, 3) if bare_p50 > 0 else None,
        "default_audit": _mode(shipped),
        "durable_p50_ms": round(durable_p50, 4),
        "durable_ratio_p50": round(durable_p50 / bare_p50, 3) if bare_p50 > 0 else None,
        "deferred_p50_ms": round(deferred_p50, 4),
        "deferred_ratio_p50": round(deferred_p50 / bare_p50, 3) if bare_p50 > 0 else None,
        "no_audit_p50_ms": round(quiet_p50, 4),
        "no_audit_ratio_p50": round(quiet_p50 / bare_p50, 3) if bare_p50 > 0 else None,
        "audit_unavailable": unavailable,
    }


def _durable(variant: Callable[..., Gate]) -> Gate:
    """The gate that records every decision before it answers (`audit="durable"`; `True` in a
    gate that does not know that name)."""
    try:
        return variant("durable")
    except ValueError:
        return variant(True)


def _mode(gate: Gate) -> str:
    """The name of a gate's audit mode."""
    return gate.audit_mode


def _label(row: Mapping[str, Any]) -> str:
    return f"{row['heads_from']} |D(a)|={row['deps']} depth {row['depth']}"


async def store_rows(
    name: str,
    store: AsyncStore,
    policy: Policy,
    cases: list[Case],
    repeat: int,
    rows: list[dict[str, Any]],
    progress: Progress,
) -> None:
    gate = Gate(store, policy, agent=REQUESTER, audit="durable")
    for case in cases:
        keys = case.keys

        async def bare(keys: list[str] = keys) -> object:
            return await store.states(keys)

        rows.append({"heads_from": name, **await _measure(gate, case, bare, repeat)})
        progress.advance(_label(rows[-1]))


async def http_rows(
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
    gate = Gate(store, policy, heads=heads, agent=REQUESTER, audit="durable")
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


async def traffic(
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
            space = store_key_space(store, f"t{n}/")
            wiring = Wiring(store, policy, REQUESTER, heads=http, key_space=space)
            executor = build_executor(label, wiring)
            try:
                for _ in range(repeat):
                    verdict = await executor.check(ToolCall(case.tool, {}, case.plan))
                    if verdict.verdict != ALLOW:
                        raise RuntimeError(f"traffic plan not allowed: {verdict.message}")
            finally:
                await flush_audit(executor)
                await http.aclose()
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
