"""A policy entry may reserve a tool to some agents (`agents = ["executor"]`): a call by anyone
else, or by no named agent, is blocked (`agent_not_allowed`), gated or ungated."""

from __future__ import annotations

import pytest

from planfence.plugins.gate import Gate, Policy, PolicyError, ToolCall, create_plan
from planfence.shared_memory import AsyncStore

POLICY = """
[tools.ship]
depends_on = ["order/{id}"]
agents = ["executor", "night-shift"]

[tools.peek]
ungated = true
agents = ["auditor"]

[tools.open]
depends_on = ["order/{id}"]
"""


async def test_only_the_named_agents_may_call_the_tool(astore: AsyncStore) -> None:
    await astore.own("order/7", "sales")
    order = await astore.put("order/7", {"status": "confirmed"}, author="sales")
    plan = (await create_plan(astore, author="planner", parents=[order.id])).id
    gate = Gate(astore, Policy.from_toml(POLICY))
    for agent in ("executor", "night-shift"):
        assert (await gate.check(ToolCall("ship", {"id": "7"}, plan, agent=agent))).allowed
    for agent in ("planner", None):
        v = await gate.check(ToolCall("ship", {"id": "7"}, plan, agent=agent))
        assert (v.verdict, v.reason) == ("block", "agent_not_allowed")
        assert "executor, night-shift" in v.message
    assert (await gate.check(ToolCall("peek", {}, None, agent="auditor"))).allowed
    v = await gate.check(ToolCall("peek", {}, None, agent="executor"))
    assert (v.verdict, v.reason) == ("block", "agent_not_allowed")
    assert (await gate.check(ToolCall("open", {"id": "7"}, plan, agent="anyone"))).allowed


def test_the_agents_field_round_trips_and_is_validated() -> None:
    policy = Policy.from_toml(POLICY)
    assert policy.to_dict()["tools"]["ship"]["agents"] == ["executor", "night-shift"]
    assert Policy.coerce(policy.to_dict()).get("ship") == policy.get("ship")
    for bad, says in (
        ("agents = []", "non-empty list"),
        ('agents = "executor"', "non-empty list"),
        ('agents = ["not an/agent"]', "agents:"),
    ):
        with pytest.raises(PolicyError, match=says):
            Policy.from_toml(f'[tools.ship]\ndepends_on = ["order/{{id}}"]\n{bad}\n')
