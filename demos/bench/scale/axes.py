"""The three axes of `bench scale`: store size, |D(a)|, and gate processes sharing a store."""

from __future__ import annotations

import asyncio
import json
import sys
import time
from collections.abc import Sequence
from typing import Any

from planfence.demos.bench.harness.stats import percentile
from planfence.demos.support import Progress
from planfence.plugins.gate import ALLOW, Gate, Policy, ToolCall, create_plan
from planfence.shared_memory import AsyncStore, Record
from planfence.shared_memory.batches import AdvanceHead, AssignOwner, WriteBatch

from ..harness.lifeline import lifeline
from ..harness.scratch import scratch_folder

OWNER = "owner"
AGENT = "bench"
TRACKED = 4  # |D(a)| of the check tracked along the store-size and process axes
VERSIONS = 10  # records per key on the store-size axis
FILL_BATCH = 250  # keys written per batch while the store grows


async def fill(store: AsyncStore, prefix: str, start: int, end: int, versions: int) -> None:
    """Keys `prefix/k<start>` .. `prefix/k<end - 1>`, owned, each with `versions` records whose
    last is the head; written in batches."""
    for base in range(start, end, FILL_BATCH):
        records: list[Record] = []
        ops: list[AssignOwner | AdvanceHead] = []
        for i in range(base, min(base + FILL_BATCH, end)):
            key = f"{prefix}/k{i:06d}"
            ops.append(AssignOwner(key, OWNER, OWNER))
            parents: tuple[str, ...] = ()
            for v in range(versions):
                rec = Record.create(key, {"v": v}, author=OWNER, parents=parents)
                records.append(rec)
                parents = (rec.id,)
            ops.append(AdvanceHead(key, parents[0], None, OWNER))
        await store.write(WriteBatch(records=tuple(records), ops=tuple(ops)))


async def plan_over(store: AsyncStore, keys: Sequence[str]) -> str:
    heads = await store.heads(keys)
    parents = [h for h in heads.values() if h is not None]
    return (await create_plan(store, author=AGENT, parents=parents)).id


async def timed_checks(
    store: AsyncStore, keys: Sequence[str], plan: str, repeat: int
) -> dict[str, float]:
    """`repeat` allow-path checks (default audit mode) interleaved with bare reads of the same
    heads, after a warm-up; p50/p99 of the check, p50 of the read (ms)."""
    gate = Gate(store, Policy().declare("act", list(keys)), agent=AGENT)
    checks: list[float] = []
    reads: list[float] = []
    warmup = max(2, repeat // 10)
    try:
        for i in range(warmup + repeat):
            for step in ("check", "read") if i % 2 else ("read", "check"):
                t0 = time.perf_counter()
                if step == "check":
                    verdict = await gate.check(ToolCall("act", {}, plan))
                    if verdict.verdict != ALLOW:
                        raise RuntimeError(f"benchmark plan not allowed: {verdict.message}")
                else:
                    await store.states(keys)
                (checks if step == "check" else reads).append(time.perf_counter() - t0)
            if i == warmup - 1:
                checks.clear()
                reads.clear()
    finally:
        await gate.aclose()
    return {
        "check_p50_ms": round(percentile(checks, 50) * 1000, 4),
        "check_p99_ms": round(percentile(checks, 99) * 1000, 4),
        "bare_read_p50_ms": round(percentile(reads, 50) * 1000, 4),
    }


async def size_axis(
    store: AsyncStore,
    sizes: Sequence[tuple[int, int]],
    repeat: int,
    rows: list[dict[str, Any]],
    progress: Progress,
) -> None:
    """Grow the store through `sizes` ((records, keys) pairs) and time the same check at each."""
    keys = [f"size/k{i:06d}" for i in range(TRACKED)]
    have = 0
    plan = ""
    for records, key_count in sizes:
        await fill(store, "size", have, key_count, max(1, records // key_count))
        have = key_count
        if not plan:
            plan = await plan_over(store, keys)
        timed = await timed_checks(store, keys, plan, repeat)
        row = {"records": records, "keys": key_count, **timed}
        first = rows[0] if rows else row
        row["p50_vs_smallest"] = round(row["check_p50_ms"] / first["check_p50_ms"], 3)
        row["p99_vs_smallest"] = round(row["check_p99_ms"] / first["check_p99_ms"], 3)
        rows.append(row)
        progress.advance(f"store size {records} records, {key_count} keys")


async def deps_axis(
    store: AsyncStore,
    deps: Sequence[int],
    repeat: int,
    rows: list[dict[str, Any]],
    progress: Progress,
) -> None:
    """The same check at each |D(a)| in `deps` (one version a key, the plan cites the heads)."""
    await fill(store, "deps", 0, max(deps), 1)
    for n in deps:
        keys = [f"deps/k{i:06d}" for i in range(n)]
        plan = await plan_over(store, keys)
        rows.append({"deps": n, **await timed_checks(store, keys, plan, repeat)})
        progress.advance(f"|D(a)| = {n}")


def slope(rows: Sequence[dict[str, Any]], x: str, y: str) -> float | None:
    """Least-squares slope of `y` over `x`."""
    if len(rows) < 2:
        return None
    xs = [float(r[x]) for r in rows]
    ys = [float(r[y]) for r in rows]
    mx, my = sum(xs) / len(xs), sum(ys) / len(ys)
    den = sum((a - mx) ** 2 for a in xs)
    return sum((a - mx) * (b - my) for a, b in zip(xs, ys, strict=True)) / den if den else None


async def process_axis(
    backend: str,
    url: str,
    store: AsyncStore,
    counts: Sequence[int],
    seconds: float,
    rows: list[dict[str, Any]],
    progress: Progress,
) -> None:
    """`n` gate processes on one store (for each n in `counts`), each checking a current plan
    over the same keys for `seconds` after a common start: checks per second in all, p50/p99."""
    await fill(store, "procs", 0, TRACKED, 1)
    keys = [f"procs/k{i:06d}" for i in range(TRACKED)]
    plan = await plan_over(store, keys)
    for n in counts:
        latencies = await _race(url, plan, keys, n, seconds)
        total = sum(len(w) for w in latencies)
        every = [x for w in latencies for x in w]
        rows.append(
            {
                "backend": backend,
                "processes": n,
                "checks_per_s": round(total / seconds, 1),
                "check_p50_ms": round(percentile(every, 50), 4),
                "check_p99_ms": round(percentile(every, 99), 4),
            }
        )
        progress.advance(f"{n} gate processes on {backend}")


async def _race(
    url: str, plan: str, keys: Sequence[str], n: int, seconds: float
) -> list[list[float]]:
    with scratch_folder("planfence-bench-scale-") as tmp:
        go = tmp / "go"
        argv = [url, plan, ",".join(keys), str(go), str(seconds), str(lifeline())]
        procs = [
            await asyncio.create_subprocess_exec(
                sys.executable,
                "-m",
                "planfence.demos.bench.scale.worker",
                *argv,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE,
                pass_fds=(lifeline(),),
            )
            for _ in range(n)
        ]
        try:
            for p in procs:  # every worker is open and warm before the clock starts
                assert p.stderr is not None
                line = await asyncio.wait_for(p.stderr.readline(), 120)
                if line.strip() != b"ready":
                    rest = await p.stderr.read()
                    raise RuntimeError(f"gate process failed: {(line + rest).decode()[-2000:]}")
            go.write_text("go")
            out = []
            for p in procs:
                stdout, stderr = await asyncio.wait_for(p.communicate(), seconds + 120)
                if p.returncode != 0:
                    raise RuntimeError(f"gate process failed: {stderr.decode()[-2000:]}")
                out.append(json.loads(stdout)["latencies_ms"])
            return out
        finally:
            for p in procs:
                if p.returncode is None:
                    p.kill()
                    await p.wait()
