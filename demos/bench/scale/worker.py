"""One gate process of `bench scale`'s process axis: wait for the common start, check one plan
for a fixed time, print the latencies (ms) as JSON on stdout.

    python -m planfence.demos.bench.scale.worker URL PLAN KEY,KEY,... GO_FILE SECONDS [PARENT_FD]

PARENT_FD: the benchmark's lifeline (`harness.lifeline`): the worker stops when it closes.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
import time

from planfence.plugins.gate import ToolCall


async def _work(url: str, plan: str, keys: list[str], go: str, seconds: float) -> list[float]:
    from planfence.plugins.gate import ALLOW, Gate, Policy
    from planfence.shared_memory import open_async_store

    store = await open_async_store(url)
    gate = Gate(store, Policy().declare("act", keys), agent=f"worker{os.getpid()}")
    try:
        verdict = await gate.check(
            ToolCall("act", {}, plan)
        )  # warm: the plan's lineage is remembered
        if verdict.verdict != ALLOW:
            raise RuntimeError(f"benchmark plan not allowed: {verdict.reason} {verdict.message}")
        print("ready", file=sys.stderr, flush=True)
        while not os.path.exists(go):  # noqa: ASYNC110, ASYNC240  (another process creates it)
            await asyncio.sleep(0.002)
        latencies: list[float] = []
        end = time.perf_counter() + seconds
        while True:  # at least one check, however busy the machine
            t0 = time.perf_counter()
            verdict = await gate.check(ToolCall("act", {}, plan))
            latencies.append((time.perf_counter() - t0) * 1000.0)
            if verdict.verdict != ALLOW:
                raise RuntimeError(f"benchmark plan refused: {verdict.reason} {verdict.message}")
            if t0 >= end:
                return latencies
    finally:
        await gate.aclose()
        await store.aclose()


def main(argv: list[str]) -> None:
    url, plan, keys, go, seconds, *parent = argv
    if parent:
        from planfence.demos.bench.harness.lifeline import die_with_parent

        die_with_parent(int(parent[0]))
    latencies = asyncio.run(_work(url, plan, keys.split(","), go, float(seconds)))
    print(json.dumps({"latencies_ms": [round(x, 4) for x in latencies]}))


if __name__ == "__main__":
    main(sys.argv[1:])
