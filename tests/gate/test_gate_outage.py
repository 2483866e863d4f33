"""The seam's one answer for a store that cannot be reached: `store_unavailable`, whether the
adapter could not stamp its plan (`PlanUnavailable`) or the check itself could not read."""

from __future__ import annotations

import pytest

from planfence.plugins.gate import GateMiddleware, PlanStamper, Policy, ToolCall
from planfence.plugins.gate.outage import PlanUnavailable
from planfence.shared_memory import open_store

REQ = "trip/42/requirements"
POLICY = Policy().declare("book_flight", depends_on=[REQ]).declare("check_weather", ungated=True)


def test_a_closed_sync_store_is_store_unavailable_not_an_internal_error() -> None:
    store = open_store("memory://")
    store.own(REQ, "customer")
    store.put(REQ, {"destination": "Lisbon"}, author="customer")
    stamper = PlanStamper(store, "booker")
    plan = stamper.bridge.run(stamper.stamp, [store.head(REQ) or ""]).id
    store.close()
    gate = GateMiddleware(store, POLICY, agent="booker")
    judged = gate.judge_sync(ToolCall("book_flight", {"destination": "Lisbon"}, plan))
    assert (judged.verdict.verdict, judged.verdict.reason) == ("block", "store_unavailable")


@pytest.mark.parametrize(
    ("tool", "expected"),
    [
        ("book_flight", ("block", "store_unavailable")),
        ("check_weather", ("allow", "ungated")),
        ("cancel_trip", ("block", "undeclared_tool")),
    ],
)
async def test_a_call_whose_plan_could_not_be_stamped(tool: str, expected: object) -> None:
    store = open_store("memory://")
    gate = GateMiddleware(store, POLICY, agent="booker")
    try:
        down = PlanUnavailable("StoreUnavailableError: the database went away")
        judged = await gate.judge(ToolCall(tool, {"destination": "Lisbon"}, down))
        assert (judged.verdict.verdict, judged.verdict.reason) == expected
        if expected[1] == "store_unavailable":
            assert "the database went away" in judged.verdict.message
    finally:
        await gate.aclose()
        store.close()
