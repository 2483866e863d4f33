"""The processes of `bench window`: executors that call a timed tool through the gate, and an
owner that advances heads. Each runs in its own interpreter (spawned), opens the store by URL,
waits for the start signal, works until the deadline and reports its counts on a queue."""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass
from typing import Any

from planfence.plugins.gate import Allowed, GateMiddleware, Policy, ToolCall, create_plan
from planfence.plugins.gate.fence import StaleFenceError, fenced_write
from planfence.shared_memory import (
    AsyncStore,
    HeadConflictError,
    Record,
    WriteBatch,
    open_async_store,
)
from planfence.shared_memory.batches import AdvanceHead

from ..harness.lifeline import die_with_parent

TOOL = "act"
OWNER = "owner"
MODES = ("gate", "fence", "lease")


@dataclass(frozen=True)
class Setup:
    """What every process of one mode's run needs to know (pickled to the spawned process)."""

    url: str
    mode: str
    keys: tuple[str, ...]
    tool_ms: int
    lease_ms: int
    owner_interval_ms: float
    seconds: float


def data_key(mode: str, i: int) -> str:
    return f"window/{mode}/item/{i}"


def effects_key(mode: str, n: int) -> str:
    return f"window/{mode}/effects/executor-{n}"


def executor_name(n: int) -> str:
    return f"executor-{n}"


def policy_for(setup: Setup) -> Policy:
    lease = setup.lease_ms if setup.mode == "lease" else None
    return Policy().declare(TOOL, [f"window/{setup.mode}/item/{{item}}"], lease_ms=lease)


# The processes start with Ctrl-C ignored: the parent reports and ends them (see `command`).


def executor_main(setup: Setup, n: int, ready: Any, go: Any, out: Any) -> None:
    die_with_parent()
    out.put(("executor", n, asyncio.run(_executor(setup, n, ready, go))))


def owner_main(setup: Setup, ready: Any, go: Any, out: Any) -> None:
    die_with_parent()
    out.put(("owner", 0, asyncio.run(_owner(setup, ready, go))))


async def _started(ready: Any, go: Any) -> None:
    ready.release()
    await asyncio.to_thread(go.wait)


async def _executor(setup: Setup, n: int, ready: Any, go: Any) -> dict[str, int]:
    me = executor_name(n)
    store = await open_async_store(setup.url)
    gate = GateMiddleware(store, policy_for(setup), agent=me)
    counts = {"actions": 0, "allowed": 0, "refused": 0, "fence_refused": 0}
    mine = effects_key(setup.mode, n)
    try:
        await _started(ready, go)
        deadline = time.monotonic() + setup.seconds
        i = n
        while time.monotonic() < deadline:
            item = i % len(setup.keys)
            i += 1
            head = await store.head(setup.keys[item])
            if head is None:
                continue
            plan = await create_plan(store, author=me, parents=[head])
            counts["actions"] += 1
            async with gate.guard(ToolCall(TOOL, {"item": str(item)}, plan.id)) as judged:
                if not judged.allowed:
                    counts["refused"] += 1
                    continue
                counts["allowed"] += 1
                await asyncio.sleep(setup.tool_ms / 1000)  # the tool's own work
                effect = Record.create(mine, {"item": item}, author=me, parents=[plan.id])
                batch = WriteBatch(
                    records=(effect,),
                    ops=(AdvanceHead(mine, effect.id, await store.head(mine), me),),
                )
                token = judged.fence if isinstance(judged, Allowed) else None
                if setup.mode == "fence" and token is not None:
                    try:
                        await fenced_write(token, store, batch)
                    except StaleFenceError:
                        counts["fence_refused"] += 1
                else:
                    await store.write(batch)
    finally:
        try:
            await gate.aclose()  # the deferred audit writes the allows it queued
        finally:
            await store.aclose()
    return counts


async def _owner(setup: Setup, ready: Any, go: Any) -> dict[str, Any]:
    store: AsyncStore = await open_async_store(setup.url)
    waits: list[float] = []
    try:
        await _started(ready, go)
        deadline = time.monotonic() + setup.seconds
        n = 0
        while time.monotonic() < deadline:
            key = setup.keys[n % len(setup.keys)]
            n += 1
            start = time.perf_counter()
            try:
                await store.put(key, {"n": n}, author=OWNER)
            except HeadConflictError:
                continue
            waits.append(time.perf_counter() - start)
            await asyncio.sleep(setup.owner_interval_ms / 1000)
    finally:
        await store.aclose()
    return {"advances": len(waits), "waits_s": waits}
