"""`decide`, the PlanFence rule, driven with plain values: no store, no head source, no I/O."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from planfence.plugins.gate.decision import (
    HeadAnswer,
    PlanView,
    ToolCall,
    args_digest,
    decide,
)
from planfence.plugins.gate.values import value_digests
from planfence.shared_memory import KeyState, Record
from planfence.shared_memory.lineage import Frontier
from planfence.shared_memory.records import KIND_PLAN

ORDER, ADDR = "order/7", "address/ana"
SCOPE = (ADDR, ORDER)
V1 = {k: Record.create(k, 1, author="o", created_at="t").id for k in SCOPE}
V2 = {k: Record.create(k, 2, author="o", created_at="t").id for k in SCOPE}
PLAN = Record.create("plan/p", "go", author="planner", parents=list(V1.values()), kind=KIND_PLAN)
REPLAN_PLAN = Record.create(
    "plan/p",
    "again",
    author="planner",
    parents=list(V1.values()),
    kind=KIND_PLAN,
    supersedes=PLAN.id,
)
FACT = Record.create("note/n", "x", author="o")


def frontier(used: Mapping[str, set[str]], **kw: Any) -> Frontier:
    return Frontier(
        roots=(PLAN.id,),
        versions={k: frozenset(v) for k, v in used.items()},
        visited=3,
        **kw,
    )


def view(
    used: Mapping[str, set[str]] | None = None,
    *,
    plan: Record | None = PLAN,
    owners: Mapping[str, str] | None = None,
    fr: Frontier | None = None,
    refused: bool = False,
) -> PlanView:
    used = {k: {V1[k]} for k in SCOPE} if used is None else used
    owners = {k: "o" for k in SCOPE} if owners is None else owners
    states = {k: KeyState(k, o, None) for k, o in owners.items()}
    return PlanView(plan, fr or frontier(used), states, refused)


def heads(current: Mapping[str, str], **errors: HeadAnswer) -> dict[str, HeadAnswer]:
    return {**{k: HeadAnswer(h) for k, h in current.items()}, **errors}


REQ = ToolCall("ship", {"order_id": "7"}, PLAN.id, "executor")
CURRENT = heads(V1)
ONE_CHANGED = heads({ORDER: V1[ORDER], ADDR: V2[ADDR]})

# (name, view, heads, budget_spent, replan_spent, verdict, reason)
CASES = [
    ("all current", view(), CURRENT, False, False, "allow", "current"),
    ("one key changed", view(), ONE_CHANGED, False, False, "replan", "stale_dependencies"),
    ("changed, budget spent", view(), ONE_CHANGED, True, False, "block", "stale_after_replan"),
    ("changed, caller spent it", view(), ONE_CHANGED, False, True, "block", "stale_after_replan"),
    (
        "changed, superseded refused",
        view(refused=True),
        ONE_CHANGED,
        False,
        False,
        "block",
        "stale_after_replan",
    ),
    (
        "two versions of a key",
        view({ORDER: {V1[ORDER], V2[ORDER]}, ADDR: {V1[ADDR]}}),
        heads({ORDER: V2[ORDER], ADDR: V1[ADDR]}),
        False,
        False,
        "replan",
        "stale_dependencies",
    ),
    ("no such plan", view(plan=None), CURRENT, False, False, "block", "unknown_plan"),
    ("not a plan", view(plan=FACT), CURRENT, False, False, "block", "unknown_plan"),
    (
        "unknown parent",
        view(fr=frontier({}, unknown=frozenset({"e" * 64}))),
        CURRENT,
        False,
        False,
        "block",
        "unknown_record",
    ),
    (
        "parent cycle",
        view(fr=frontier({}, cycle=(PLAN.id, PLAN.id))),
        CURRENT,
        False,
        False,
        "block",
        "incomplete_lineage",
    ),
    (
        "walk over bound",
        view(fr=frontier({}, truncated=True)),
        CURRENT,
        False,
        False,
        "block",
        "lineage_too_large",
    ),
    (
        "key never reached",
        view({ORDER: {V1[ORDER]}, ADDR: set()}),
        CURRENT,
        False,
        False,
        "block",
        "incomplete_lineage",
    ),
    (
        "key without owner",
        view(owners={ORDER: "o"}),
        CURRENT,
        False,
        False,
        "block",
        "unknown_record",
    ),
    ("owner silent", view(), heads({ORDER: V1[ORDER]}), False, False, "block", "owner_unreachable"),
    (
        "owner forged",
        view(),
        heads(
            {ORDER: V1[ORDER]},
            **{ADDR: HeadAnswer(error="owner_unauthenticated", detail="bad signature")},
        ),
        False,
        False,
        "block",
        "owner_unauthenticated",
    ),
    (
        "owner odd error",
        view(),
        heads({ORDER: V1[ORDER]}, **{ADDR: HeadAnswer(error="weird")}),
        False,
        False,
        "block",
        "owner_unreachable",
    ),
]


@pytest.mark.parametrize(
    ("name", "plan_view", "answers", "budget", "spent", "verdict", "reason"),
    CASES,
    ids=[c[0] for c in CASES],
)
def test_decide(
    name: str,
    plan_view: PlanView,
    answers: dict[str, HeadAnswer],
    budget: bool,
    spent: bool,
    verdict: str,
    reason: str,
) -> None:
    req = ToolCall(REQ.tool, REQ.args, REQ.plan, REQ.agent, spent)
    got = decide(req, SCOPE, plan_view, answers, budget_spent=budget, max_records=100)
    assert (got.verdict, got.reason) == (verdict, reason), got.message
    assert got.scope == SCOPE and got.tool == "ship" and got.agent == "executor"
    if verdict != "allow":
        assert got.message
    if reason in ("stale_dependencies", "stale_after_replan"):
        assert [s.key for s in got.stale] == [
            k for k in SCOPE if {answers[k].head} != plan_view.frontier.used(k)
        ]  # type: ignore[union-attr]


def test_a_replan_names_used_and_current_versions() -> None:
    got = decide(REQ, SCOPE, view(), ONE_CHANGED, budget_spent=False, max_records=100)
    [stale] = got.stale
    assert (stale.key, stale.used, stale.current) == (ADDR, (V1[ADDR],), V2[ADDR])
    assert got.frontier == {k: (V1[k],) for k in SCOPE}
    assert got.heads == {ORDER: V1[ORDER], ADDR: V2[ADDR]}


def test_the_replans_own_plan_is_judged_like_any_other() -> None:
    req = ToolCall("ship", {}, REPLAN_PLAN.id)
    got = decide(req, SCOPE, view(plan=REPLAN_PLAN), CURRENT, budget_spent=False, max_records=9)
    assert got.allowed


versions = st.sampled_from(["a" * 64, "b" * 64, "c" * 64])


@given(
    used=st.dictionaries(st.sampled_from(SCOPE), st.sets(versions, max_size=2)),
    current=st.fixed_dictionaries({k: versions for k in SCOPE}),
    budget=st.booleans(),
)
def test_allow_exactly_when_every_frontier_is_the_head(
    used: dict[str, set[str]], current: dict[str, str], budget: bool
) -> None:
    full = {k: used.get(k, set()) for k in SCOPE}
    got = decide(REQ, SCOPE, view(full), heads(current), budget_spent=budget, max_records=100)
    assert got.allowed == all(full[k] == {current[k]} for k in SCOPE)
    if not got.allowed:
        assert got.verdict in ("replan", "block")


def test_reason_codes_are_an_enum_that_reads_as_its_value() -> None:
    import json

    from planfence.plugins.gate import Decision
    from planfence.plugins.gate.decision import Reason
    from planfence.plugins.gate.wire import payload_of

    got = decide(REQ, SCOPE, view(), ONE_CHANGED, budget_spent=False, max_records=100)
    assert got.reason is Reason.STALE
    assert f"{got.reason}" == str(got.reason) == "stale_dependencies"
    assert json.loads(json.dumps(payload_of(got).wire()))["reason"] == "stale_dependencies"
    logged = Decision(source="gate", verdict=got.verdict, reason=got.reason)
    assert type(logged.reason) is str and logged.reason == "stale_dependencies"


def test_evolve_copies_like_replace_and_refuses_unknown_fields() -> None:
    got = decide(REQ, SCOPE, view(), ONE_CHANGED, budget_spent=False, max_records=100)
    stamped = got.evolve(latency_ms=1.5, decision_id=7)
    assert stamped == replace(got, latency_ms=1.5, decision_id=7)
    assert (got.latency_ms, got.decision_id) == (0.0, None)  # the original is unchanged
    with pytest.raises(TypeError, match="no field 'latency'"):
        got.evolve(latency=1)


def test_a_request_digests_its_arguments_once_into_every_verdict() -> None:
    req = ToolCall("ship", {"order_id": "7", "n": 12}, PLAN.id, "executor")
    got = decide(req, SCOPE, view(), CURRENT, budget_spent=False, max_records=100)
    assert got.args_digest == args_digest(req.args) and len(got.args_digest) == 64
    assert dict(got.value_digests) == value_digests(req.args)
    assert got.value_digests is req.value_digests
