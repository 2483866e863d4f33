"""A stale-then-replan workflow recorded in a store, for the UI tests."""

from __future__ import annotations

import json
from dataclasses import dataclass

from planfence.plugins.gate import Policy, SyncGate, ToolCall
from planfence.shared_memory import Store
from planfence.shared_memory.records import KIND_PLAN

POLICY = Policy.from_toml(
    """
[tools.ship_order]
depends_on = ["order/{order_id}", "address/{customer}"]
"""
)
ARGS = {"order_id": "7", "customer": "ana"}


@dataclass
class World:
    old_plan: str
    plan: str
    order_used: str
    order_now: str
    address: str


def stale_then_replan(store: Store) -> World:
    """A plan cites an order version, sales changes the order, the gate asks for a replan, the
    replan (superseding the first plan) is allowed."""
    store.own("order/7", "sales")
    store.own("address/ana", "ana")
    order = store.put("order/7", {"status": "confirmed"}, author="sales")
    address = store.put("address/ana", {"line": "1 Harbour St <b>&"}, author="ana")
    plan1 = store.add(
        "plan/shipper",
        {"ship": True},
        author="shipper",
        parents=[order.id, address.id],
        kind=KIND_PLAN,
    )
    order2 = store.put("order/7", {"status": "changed"}, author="sales", parents=[order.id])
    gate = SyncGate(store, POLICY)
    first = gate.check(ToolCall("ship_order", ARGS, plan1.id, agent="shipper"))
    assert first.verdict == "replan", first
    plan2 = store.add(
        "plan/shipper",
        {"ship": True},
        author="shipper",
        parents=[order2.id, address.id],
        kind=KIND_PLAN,
        supersedes=plan1.id,
    )
    second = gate.check(ToolCall("ship_order", ARGS, plan2.id, agent="shipper"))
    assert second.verdict == "allow", second
    gate.close()  # the deferred audit writes the allow the pages show
    return World(plan1.id, plan2.id, order.id, order2.id, address.id)


NOTES = [{"v": 1}, {"v": 2, "tags": ["a"]}, {"v": 3}]
MEMORY = 'Rule 1: say "hello" first.\nRule 2: fact0 & <fact1>'
REFUSALS = 205


@dataclass
class Busy:
    world: World
    notes: list[str]  # the versions of notes/team, oldest first
    memory: str  # the deployed Janus memory's record id


def busy(url: str) -> Busy:
    """The stale-then-replan workflow, then what a first day adds: a key written three times
    with `planfence memory put` (no --parents), a Janus-managed key, and more refusals than one
    page of the decision log holds."""
    import asyncio
    import contextlib
    import io

    from planfence.adapters.cli.main import main
    from planfence.plugins.janus import (
        FunctionEvaluator,
        JanusConfig,
        JanusController,
        JanusStoreHook,
        Task,
    )
    from planfence.shared_memory import open_async_store, open_store

    with open_store(url) as store:
        world = stale_then_replan(store)
    notes = []
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        assert main(["memory", "own", "notes/team", "--owner", "ana", "--store", url]) == 0
        for value in NOTES:
            argv = ["memory", "put", "notes/team", "--as", "ana", "--value", json.dumps(value)]
            assert main([*argv, "--store", url]) == 0
            notes.append(out.getvalue().split()[-1])

    async def curate() -> str:
        config = JanusConfig(support_size=1, coverage_size=1, fresh_size=1, trigger="always")
        judge = FunctionEvaluator(lambda memory, task: "fact0" in str(memory))
        store = await open_async_store(url)
        try:
            hook = JanusStoreHook(
                store, "team/memory", JanusController(judge, config=config), owner="janus"
            )
            await hook.open()
            done = await hook.submit(MEMORY, Task(id="t0", question="?", answer="fact0"))
            assert done.verdict.deploy
            return done.record.id
        finally:
            await store.aclose()

    memory = asyncio.run(curate())
    with open_store(url) as store, SyncGate(store, POLICY) as gate:
        for n in range(REFUSALS):
            verdict = gate.check(ToolCall("ship_order", {**ARGS, "order_id": str(n)}, None)).verdict
            assert verdict == "block"
    return Busy(world, notes, memory)


@dataclass
class TwoVersions:
    plan: str  # cites revs[3] directly, and revs[2] through `earlier`
    earlier: str  # the plan `plan` was derived from, which cites revs[2]
    revs: list[str]  # cfg/x's versions, oldest first: value {"rev": 1} ... {"rev": 5}


def two_versions_used(store: Store) -> TwoVersions:
    """A plan that used two versions of one key (rev 4 directly, rev 3 through the plan it was
    derived from), both stale: rev 5 is the head."""
    store.own("cfg/x", "ana")
    revs = [store.put("cfg/x", {"rev": n}, author="ana").id for n in range(1, 6)]
    earlier = store.add("plans/bob", {"v": 1}, author="bob", parents=[revs[2]], kind=KIND_PLAN)
    plan = store.add(
        "plans/bob", {"v": 2}, author="bob", parents=[revs[3], earlier.id], kind=KIND_PLAN
    )
    return TwoVersions(plan.id, earlier.id, revs)
