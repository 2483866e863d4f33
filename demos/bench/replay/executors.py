"""The executors the replay runs, from the shared registry in `planfence.demos.executors`, in
the replay's order; each replica's executor is timed (the action path's stall)."""

from __future__ import annotations

import time
from collections.abc import Mapping

from planfence.demos.baselines import EagerSync, store_key_space
from planfence.demos.executors import Wiring, build_executor
from planfence.plugins.gate import HeadSource, Policy, ToolCall, Verdict
from planfence.plugins.gate.call import Checker
from planfence.shared_memory import AsyncStore
from planfence.shared_memory.replica import Replica

EXECUTORS = ("planfence", "eager", "allkeys", "freshness")
SAFE = ("planfence", "eager", "allkeys")


def replica_executor(
    executor: str,
    agent: str,
    store: AsyncStore,
    policy: Policy,
    *,
    heads: HeadSource | None,
    space: str,
    owner_of: Mapping[str, str],
    sync: EagerSync | None,
) -> Checker:
    """One replica's executor, built by the registry and wired to the replay: owner heads over
    HTTP, the key space under `space`, the eager update path `sync`, and (freshness) a replica of
    that key space that asks the owners of D(a) for their heads before it catches up."""
    wiring = Wiring(
        store,
        policy,
        agent,
        heads=heads,
        key_space=store_key_space(store, space + "/"),
        eager=sync,
        replica=Replica(store, prefix=space + "/"),
        owner_of=owner_of,
    )
    return build_executor(executor, wiring)


class Timed(Checker):
    """Wraps an executor; adds up the wall time of its checks (the action path's stall)."""

    def __init__(self, inner: Checker) -> None:
        self.inner = inner
        self.name = inner.name
        # The seam guards the call over the same store and policy the wrapped executor checks.
        self.store = inner.store
        self.policy = inner.policy
        self.spent = 0.0

    async def check(self, call: ToolCall) -> Verdict:
        t0 = time.perf_counter()
        try:
            return await self.inner.check(call)
        finally:
            self.spent += time.perf_counter() - t0
