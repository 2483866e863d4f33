"""One executor registry: every name the demos and the replay benchmark run is built there, from
the parts the caller wires in."""

from __future__ import annotations

import pytest

from planfence.demos.baselines import AllKeysHeads, EagerExecutor, EagerSync, FreshnessOnly
from planfence.demos.bench.replay.executors import EXECUTORS as REPLAY_EXECUTORS
from planfence.demos.executors import EXECUTORS, REGISTRY, Wiring, build_executor
from planfence.plugins.gate import Gate, Policy, StoreHeads
from planfence.shared_memory import create_async_store
from planfence.shared_memory.replica import Replica


def wiring() -> Wiring:
    return Wiring(create_async_store("memory://"), Policy(), "executor")


def test_demo_and_replay_run_the_same_registered_executors() -> None:
    assert tuple(REGISTRY) == EXECUTORS
    assert sorted(REPLAY_EXECUTORS) == sorted(EXECUTORS)


def test_each_name_builds_its_executor_from_the_wired_parts() -> None:
    w = wiring()
    heads = StoreHeads(w.store)
    replica = Replica(w.store, prefix="x/")
    sync = EagerSync(w.store)
    w = Wiring(w.store, w.policy, w.agent, heads=heads, eager=sync, replica=replica)

    planfence = build_executor("planfence", w)
    assert isinstance(planfence, Gate) and planfence.head_source is heads

    allkeys = build_executor("allkeys", w)
    assert isinstance(allkeys, Gate) and isinstance(allkeys.head_source, AllKeysHeads)
    assert allkeys.head_source.inner is heads

    fresh = build_executor("freshness", w)
    assert isinstance(fresh, FreshnessOnly) and fresh.replica is replica

    eager = build_executor("eager", w)
    assert isinstance(eager, EagerExecutor) and eager.sync is sync
    assert eager.replica in sync.replicas


def test_an_unknown_name_or_a_missing_part_is_refused() -> None:
    with pytest.raises(ValueError, match="unknown executor 'psychic'"):
        build_executor("psychic", wiring())
    with pytest.raises(ValueError, match="needs a head source"):
        build_executor("planfence", wiring())
    with pytest.raises(ValueError, match="needs a head source"):
        build_executor("allkeys", wiring())
