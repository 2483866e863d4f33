"""`GateMiddleware.run` and `run_sync` give the tool what `GateMiddleware.guard` gives it: the
allow's fencing token as `planfence.fence.current()`, and the lease its policy declares, held
until the tool returns."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pytest

from planfence import fence
from planfence.plugins.gate import Gate, GateMiddleware, Policy, SyncGate, ToolCall, create_plan
from planfence.plugins.gate.plans import create_plan_sync
from planfence.shared_memory import AsyncStore, LeaseHeldError, Store

ORDER = "order/7"
LEASED = Policy.coerce('[tools.ship]\ndepends_on = ["order/{id}"]\nlease_ms = 2000\n')


async def test_the_seam_runs_a_tool_holding_the_lease_with_the_token_bound(
    astore: AsyncStore,
) -> None:
    await astore.own(ORDER, "sales")
    order = await astore.put(ORDER, {"status": "confirmed"}, author="sales")
    plan = await create_plan(astore, author="planner", parents=[order.id])
    gate = Gate(astore, LEASED, agent="executor")
    seen: list[fence.FenceToken | None] = []

    async def ship(args: Mapping[str, Any]) -> str:
        seen.append(fence.current())
        with pytest.raises(LeaseHeldError):
            await astore.put(ORDER, {"status": "cancelled"}, author="sales", wait=False)
        return "shipped"

    seam = GateMiddleware(astore, LEASED, gate=gate)
    outcome = await seam.run(ToolCall("ship", {"id": "7"}, plan.id), ship)
    assert outcome.executed and outcome.result == "shipped"
    [token] = seen
    assert token is not None and token.lease is not None and token.plan == plan.id
    await fence.verify(token, astore)
    assert fence.current() is None  # outside the call, no token
    await astore.put(ORDER, {"status": "cancelled"}, author="sales", wait=False)  # released


def test_the_sync_seam_runs_a_tool_holding_the_lease_with_the_token_bound(store: Store) -> None:
    store.own(ORDER, "sales")
    order = store.put(ORDER, {"status": "confirmed"}, author="sales")
    plan = create_plan_sync(store, author="planner", parents=[order.id])
    gate = SyncGate(store, LEASED, agent="executor")
    seen: list[fence.FenceToken | None] = []

    def ship(args: Mapping[str, Any]) -> str:
        seen.append(fence.current())
        with pytest.raises(LeaseHeldError):
            store.put(ORDER, {"status": "cancelled"}, author="sales", wait=False)
        return "shipped"

    outcome = gate.seam.run_sync(ToolCall("ship", {"id": "7"}, plan.id), ship)
    assert outcome.executed and outcome.result == "shipped"
    [token] = seen
    assert token is not None and token.lease is not None
    store.put(ORDER, {"status": "cancelled"}, author="sales", wait=False)  # released
    gate.close()
