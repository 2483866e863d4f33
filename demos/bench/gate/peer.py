"""planfence's allow path beside agent-coherence's `effect_gate`, the closest peer, on the same
kind of backend in one run, interleaved.

agent-coherence (`pip install agent-coherence`, imports as `ccs`) pins a snapshot of a read set,
lets the caller decide on it, re-validates every member's version and fires the effect:
`CoordinatorService.effect_gate(read_set=..., owner=..., decide=..., effect=...)`. planfence's
`Gate.check` proves that the plan's frontier over D(a) is exactly the heads. Both are timed at the
same read-set sizes, on an in-memory store (`memory://` vs `ArtifactRegistry`) and on SQLite (a
throwaway file each: planfence on its thread and with io=loop, vs `SqliteArtifactRegistry`).
"""

from __future__ import annotations

import importlib.util
import time
import uuid
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from planfence.demos.bench.harness.stats import percentile
from planfence.demos.support import Progress
from planfence.plugins.gate import ALLOW, Gate, Policy, ToolCall
from planfence.shared_memory import open_async_store
from planfence.shared_memory.factory import sqlite_on_loop

from ..harness.owners import REQUESTER, plan_at_depth, seed_keys
from ..harness.scratch import scratch_folder

PEER_DEPS = (1, 4, 16)
PEER_BACKENDS = ("memory", "sqlite", "sqlite/loop")
INSTALL = "pip install 'planfence[bench]' (agent-coherence)"


def have_peer() -> bool:
    return importlib.util.find_spec("ccs") is not None


def peer_steps() -> int:
    return len(PEER_BACKENDS) * len(PEER_DEPS) if have_peer() else 0


class _Peer:
    """One agent-coherence coordinator with `n` artifacts owned by one agent."""

    def __init__(self, registry: Any, n: int) -> None:
        from ccs.coordinator.service import CoordinatorService

        self.service = CoordinatorService(registry)
        self.owner = uuid.uuid4()
        self.read_set = [
            self.service.register_artifact(name=f"k{i}", content="v", initial_owner=self.owner).id
            for i in range(n)
        ]

    def check(self) -> None:
        from ccs.coordinator.service import EffectFired

        fired = self.service.effect_gate(
            read_set=self.read_set, owner=self.owner, decide=lambda _view: 1, effect=lambda d: d
        )
        if not isinstance(fired, EffectFired):
            raise RuntimeError(f"agent-coherence held the benchmark's effect: {fired}")


def _registry(backend: str, folder: Path, n: int) -> Any:
    from ccs.coordinator.registry import ArtifactRegistry
    from ccs.coordinator.sqlite_registry import SqliteArtifactRegistry

    if backend == "memory":
        return ArtifactRegistry()
    return SqliteArtifactRegistry(folder / f"ccs-{backend.replace('/', '-')}-{n}.db")


async def _interleaved(
    ours: Callable[[], Awaitable[None]], theirs: Callable[[], None], iterations: int
) -> tuple[list[float], list[float]]:
    warmup = max(2, iterations // 10)
    ours_s: list[float] = []
    theirs_s: list[float] = []

    async def one_ours() -> None:
        t0 = time.perf_counter()
        await ours()
        ours_s.append(time.perf_counter() - t0)

    def one_theirs() -> None:
        t0 = time.perf_counter()
        theirs()
        theirs_s.append(time.perf_counter() - t0)

    for i in range(warmup + iterations):
        if i % 2:
            await one_ours()
            one_theirs()
        else:
            one_theirs()
            await one_ours()
        if i == warmup - 1:
            ours_s.clear()
            theirs_s.clear()
    return ours_s, theirs_s


async def peer_rows(
    repeat: int, rows: list[dict[str, Any]], notes: list[str], progress: Progress
) -> None:
    """planfence's default allow beside agent-coherence's effect gate, appended to `rows` as
    they are measured (none, and a note, when agent-coherence is not installed)."""
    if not have_peer():
        notes.append(f"agent-coherence rows skipped: it is not installed ({INSTALL})")
        return
    with scratch_folder("planfence-bench-peer-") as folder:
        for backend in PEER_BACKENDS:
            url = "memory://" if backend == "memory" else f"sqlite:///{folder / 'planfence.db'}"
            if backend == "sqlite/loop":
                url = sqlite_on_loop(url)
            store = await open_async_store(url)
            try:
                for n in PEER_DEPS:
                    prefix = f"peer{n}"
                    facts = await seed_keys(store, prefix, n) if backend != "sqlite/loop" else []
                    if not facts:  # the loop store opens the file the thread store seeded
                        facts = [
                            s.head or ""
                            for s in (
                                await store.states([f"{prefix}/k{i:03d}" for i in range(n)])
                            ).values()
                        ]
                    keys = [f"{prefix}/k{i:03d}" for i in range(n)]
                    policy = Policy().declare("act", keys)
                    plan = await plan_at_depth(store, facts, 1, f"{backend}-{n}")
                    gate = Gate(store, policy, agent=REQUESTER)

                    async def ours(gate: Gate = gate, plan: str = plan) -> None:
                        verdict = await gate.check(ToolCall("act", {}, plan))
                        if verdict.verdict != ALLOW:
                            raise RuntimeError(f"benchmark plan not allowed: {verdict.message}")

                    peer = _Peer(_registry(backend, folder, n), n)
                    try:
                        ours_s, theirs_s = await _interleaved(ours, peer.check, repeat)
                    finally:
                        await gate.aclose()
                    p50, peer_p50 = percentile(ours_s, 50) * 1e6, percentile(theirs_s, 50) * 1e6
                    rows.append(
                        {
                            "backend": backend,
                            "keys": n,
                            "planfence_p50_us": round(p50, 1),
                            "planfence_p99_us": round(percentile(ours_s, 99) * 1e6, 1),
                            "agent_coherence_p50_us": round(peer_p50, 1),
                            "agent_coherence_p99_us": round(percentile(theirs_s, 99) * 1e6, 1),
                            "ratio_p50": round(p50 / peer_p50, 3) if peer_p50 > 0 else None,
                        }
                    )
                    progress.advance(f"agent-coherence {backend} {n} keys")
            finally:
                await store.aclose()
