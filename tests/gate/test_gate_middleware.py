"""The interception seam every adapter uses: middleware around the gate, and plan stamping."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from planfence.plugins.gate import (
    Allowed,
    CallNext,
    Gate,
    GateMiddleware,
    Judgement,
    Middleware,
    PlanStamper,
    Policy,
    Refused,
    ToolCall,
    Verdict,
    find_decisions,
    fold_step,
)
from planfence.plugins.gate.call import Checker
from planfence.plugins.gate.middleware import judge_with, run_middleware
from planfence.plugins.gate.reads import reads_of
from planfence.plugins.gate.steps import BLOCKED, DONE, REPLANNING
from planfence.plugins.gate.wire import payload_of
from planfence.shared_memory import AsyncStore, Record, Store

REQ = "trip/7/requirements"
POLICY = Policy().declare("book", depends_on=[REQ]).declare("weather", ungated=True)


async def seeded(store: AsyncStore) -> tuple[Record, PlanStamper]:
    await store.own(REQ, "customer")
    first = await store.put(REQ, {"to": "Lisbon"}, author="customer")
    return first, PlanStamper(store, "planner")


class Recorder(Middleware):
    def __init__(self, name: str, seen: list[str]) -> None:
        self.name, self.seen = name, seen

    async def on_call_tool(self, call: ToolCall, call_next: CallNext) -> Judgement:
        self.seen.append(f"{self.name} in")
        outcome = await call_next(call)
        self.seen.append(f"{self.name} out: {outcome.verdict.reason}")
        return outcome


class RefuseWeather(Middleware):
    async def on_call_tool(self, call: ToolCall, call_next: CallNext) -> Judgement:
        if call.tool == "weather":
            return Refused(Verdict("block", "no_weather", call.tool, None, call.agent))
        return await call_next(call)


async def test_current_plan_is_allowed_and_a_stale_one_refused(astore: AsyncStore) -> None:
    first, stamper = await seeded(astore)
    plan = await stamper.stamp(reads_of([first]))
    gate = GateMiddleware(astore, POLICY, agent="executor")
    allowed = await gate.judge(ToolCall("book", {}, plan.id))
    assert isinstance(allowed, Allowed) and allowed.verdict.reason == "current"
    assert allowed.verdict.agent == "executor"
    second = await astore.put(REQ, {"to": "Porto"}, author="customer")
    refused = await gate.judge(ToolCall("book", {}, plan.id, agent="booker"))
    assert isinstance(refused, Refused) and refused.replan
    assert refused.reason == "stale_dependencies" and refused.stale_keys == (REQ,)
    assert refused.current == {REQ: second.id}
    assert refused.verdict.agent == "booker"
    assert REQ in refused.message and "refused book" in refused.message


async def test_middleware_wraps_the_gate_outermost_first(astore: AsyncStore) -> None:
    first, stamper = await seeded(astore)
    plan = await stamper.stamp([first.id])
    seen: list[str] = []
    stack = [Recorder("outer", seen), Recorder("inner", seen), RefuseWeather()]
    gate = GateMiddleware(astore, POLICY, middleware=stack)
    assert (await gate.judge(ToolCall("book", {}, plan.id))).allowed
    assert seen == ["outer in", "inner in", "inner out: current", "outer out: current"]
    refused = await gate.judge(ToolCall("weather", {}, plan.id))
    assert isinstance(refused, Refused) and refused.reason == "no_weather"


async def test_a_stack_without_the_gate_allows_as_ungated() -> None:
    judged = await run_middleware([], ToolCall("anything", {}, "p" * 64))
    assert isinstance(judged, Allowed) and judged.verdict.reason == "ungated"


class Broken(Middleware):
    async def on_call_tool(self, call: ToolCall, call_next: CallNext) -> Judgement:
        raise RuntimeError("middleware bug")


class Exploding:
    name = "exploding"

    def __init__(self, store: AsyncStore, policy: Policy) -> None:
        self.store, self.policy = store, policy

    async def check(self, call: ToolCall) -> Verdict:
        raise RuntimeError("checker bug")


def exploding(store: AsyncStore, policy: Policy, agent: str | None) -> Checker:
    return Exploding(store, policy)


@pytest.mark.parametrize("how", ["checker", "middleware", "unreachable store"])
async def test_anything_that_goes_wrong_is_a_refusal(
    astore: AsyncStore, how: str, tmp_path: Path, audit: str
) -> None:
    first, stamper = await seeded(astore)
    plan = await stamper.stamp([first.id])
    if how == "checker":
        gate = judge_with(GateMiddleware(astore, POLICY), exploding)  # its own recording
    elif how == "middleware":
        gate = GateMiddleware(astore, POLICY, middleware=[Broken()], audit=audit)
    else:
        (tmp_path / "file").write_text("")  # a store under a file cannot be opened
        gate = GateMiddleware(f"sqlite:///{tmp_path / 'file' / 'store.db'}", POLICY, audit=audit)
    judged = await gate.judge(ToolCall("book", {}, plan.id))
    await gate.aclose()
    assert isinstance(judged, Refused) and not judged.replan
    # A store that cannot be reached says so; anything else is the gate's internal error.
    expected = "store_unavailable" if how == "unreachable store" else "internal_error"
    assert judged.reason == expected
    assert judged.verdict.plan == plan.id


async def test_one_checker_per_store_and_a_ready_checker_is_used_as_is(
    astore: AsyncStore,
) -> None:
    built: list[AsyncStore] = []

    def counting(store: AsyncStore, policy: Policy, agent: str | None) -> Checker:
        built.append(store)
        return Gate(store, policy, agent=agent)

    first, stamper = await seeded(astore)
    plan = await stamper.stamp([first.id])
    gate = judge_with(GateMiddleware(astore, POLICY), counting)
    for _ in range(3):
        assert (await gate.judge(ToolCall("book", {}, plan.id))).allowed
    assert built == [astore]
    ready = Gate(astore, POLICY, agent="ready")
    fixed = GateMiddleware(astore, POLICY, gate=ready)
    assert fixed.checker_for(astore) is ready
    assert (await fixed.judge(ToolCall("book", {}, plan.id))).verdict.agent == "ready"


def test_sync_code_judges_through_the_stores_portal(store: Store) -> None:
    store.own(REQ, "customer")
    first = store.put(REQ, 1, author="customer")
    stamper = PlanStamper(store, "planner")
    plan = stamper.bridge.run(stamper.stamp, [first.id])
    gate = GateMiddleware(store, POLICY)
    assert gate.judge_sync(ToolCall("book", {}, plan.id)).allowed
    store.put(REQ, 2, author="customer")
    assert not gate.judge_sync(ToolCall("book", {}, plan.id)).allowed


async def test_a_refusal_before_the_checker_is_on_record(astore: AsyncStore) -> None:
    gate = GateMiddleware(astore, POLICY)
    refused = await gate.refuse(ToolCall("book", {}, 42), "malformed_meta", "bad", by="test")
    assert refused.verdict.plan is None and refused.verdict.decision_id is not None
    [logged] = await find_decisions(astore, source=None, tool="book")
    assert (logged.reason, logged.payload["executor"]) == ("malformed_meta", "test")


async def test_the_stamper_keeps_the_chain_unless_told(astore: AsyncStore) -> None:
    first, stamper = await seeded(astore)
    p1 = await stamper.stamp({REQ: [first.id]}, value={"n": 1})
    p2 = await stamper.stamp([first.id, first.id])
    assert (p1.supersedes, p2.supersedes) == (None, p1.id)
    assert p2.parents == (first.id,) and p2.key == "plans/planner"
    p3 = await stamper.stamp([first.id], supersedes=None, author="other")
    assert p3.supersedes is None and p3.key == "plans/other" and stamper.last == p3.id
    stamper.reset()
    assert (await stamper.stamp([])).supersedes is None
    assert [r.id for r in await stamper.current([REQ, "trip/none"])] == [first.id]


def note(verdict: str, reason: str = "current", tool: str = "t") -> Mapping[str, Any]:
    return payload_of(Verdict(verdict, reason, tool, None)).wire()  # type: ignore[arg-type]


def test_fold_step_orders_block_over_replan_over_done() -> None:
    assert fold_step([]) is None
    step = [note("allow", tool="a"), note("replan", "stale_dependencies", "b")]
    assert fold_step(step).status == REPLANNING  # type: ignore[union-attr]
    assert fold_step(step, replans_spent=1).status == BLOCKED  # type: ignore[union-attr]
    assert fold_step([*step, note("block", "unknown_plan", "c")]).tool == "c"  # type: ignore[union-attr]
    done = fold_step([note("allow", "ungated")])
    assert done is not None and done.status == DONE and not done.gated


@given(st.lists(st.sampled_from(["allow", "replan", "block"]), min_size=1), st.integers(0, 3))
def test_fold_step_is_done_only_when_every_call_was_allowed(kinds: list[str], spent: int) -> None:
    outcome = fold_step([note(k) for k in kinds], spent)
    assert outcome is not None
    assert (outcome.status == DONE) == all(k == "allow" for k in kinds)
    if outcome.status == REPLANNING:
        assert spent == 0
