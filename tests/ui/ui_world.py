"""A stale-then-replan workflow recorded in a store, for the UI tests."""

from __future__ import annotations

from dataclasses import dataclass

from planfence.plugins.gate import Policy, SyncGate
from planfence.shared_memory import KIND_PLAN, Store

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
    first = gate.check("ship_order", ARGS, plan1.id, agent="shipper")
    assert first.verdict == "replan", first
    plan2 = store.add(
        "plan/shipper",
        {"ship": True},
        author="shipper",
        parents=[order2.id, address.id],
        kind=KIND_PLAN,
        supersedes=plan1.id,
    )
    second = gate.check("ship_order", ARGS, plan2.id, agent="shipper")
    assert second.verdict == "allow", second
    return World(plan1.id, plan2.id, order.id, order2.id, address.id)
