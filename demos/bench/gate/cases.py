"""The plans `bench gate` checks: at each |D(a)| and lineage depth (latency), and in key spaces
of several sizes (traffic)."""

from __future__ import annotations

from dataclasses import dataclass

from planfence.plugins.gate import Policy
from planfence.shared_memory import AsyncStore

from ..harness.owners import owner_of, plan_at_depth, seed_keys

DEPS = (1, 4, 16)
DEPTHS = (1, 10, 100)
KEY_SPACES = (8, 32, 128)


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


def grouped(keys: list[str]) -> dict[str, tuple[str, ...]]:
    out: dict[str, list[str]] = {}
    for key in keys:
        out.setdefault(owner_of(int(key.rsplit("k", 1)[1])), []).append(key)
    return {o: tuple(sorted(ks)) for o, ks in sorted(out.items())}


async def seed_latency(store: AsyncStore) -> tuple[Policy, list[Case]]:
    keys = [f"lat/k{i:03d}" for i in range(max(DEPS))]
    facts = await seed_keys(store, "lat", max(DEPS))
    policy = Policy()
    cases = []
    for deps in DEPS:
        tool = f"act_{deps}"
        policy = policy.declare(tool, keys[:deps])
        for depth in DEPTHS:
            plan = await plan_at_depth(store, facts[:deps], depth, f"lat-{deps}-{depth}")
            cases.append(Case(tool, deps, depth, plan, grouped(keys[:deps])))
    return policy, cases


async def seed_traffic(store: AsyncStore, policy: Policy) -> tuple[Policy, list[Case]]:
    cases = []
    for n in KEY_SPACES:
        facts = await seed_keys(store, f"t{n}", n)
        keys = [f"t{n}/k{i:03d}" for i in range(n)]
        for deps in (d for d in DEPS if d < n):
            tool = f"traffic_{n}_{deps}"
            policy = policy.declare(tool, keys[:deps])
            plan = await plan_at_depth(store, facts[:deps], 1, f"t{n}-{deps}")
            cases.append(Case(tool, deps, 1, plan, grouped(keys[:deps]), space=n))
    return policy, cases
