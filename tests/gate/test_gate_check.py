"""The gate against every store backend: allow, one replan, and each fail-closed block."""

from __future__ import annotations

import sqlite3
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import pytest
from audit_modes import AUDIT_MODES, check_until_recorded

from planfence.plugins.gate import (
    Gate,
    GateMiddleware,
    Policy,
    Replanned,
    ToolCall,
    Verdict,
    create_plan,
    find_decisions,
    refreshed_parents,
)
from planfence.plugins.gate.audit_writer import AuditBacklogError
from planfence.plugins.gate.decision import BLOCK_REASONS, HeadAnswer
from planfence.shared_memory import AsyncStore, InvalidKeyError, Record, StoreUnavailableError

POLICY = Policy.from_toml(
    """
[tools.ship_order]
depends_on = ["order/{order_id}", "address/{customer}"]

[tools.get_weather]
ungated = true
"""
)
ARGS = {"order_id": "7", "customer": "ana"}


@dataclass
class World:
    store: AsyncStore
    order: Record
    address: Record
    plan: Record


async def make_world(store: AsyncStore) -> World:
    await store.own("order/7", "sales")
    await store.own("address/ana", "ana")
    order = await store.put("order/7", {"status": "confirmed"}, author="sales")
    address = await store.put("address/ana", {"line": "1 Harbour St"}, author="ana")
    plan = await create_plan(
        store, author="planner", parents=[order.id, address.id], value={"ship": True}
    )
    return World(store, order, address, plan)


async def test_current_plan_is_allowed_and_audited(astore: AsyncStore, audit: str) -> None:
    w = await make_world(astore)
    async with Gate(astore, POLICY, audit=audit) as gate:
        v = await gate.check(ToolCall("ship_order", ARGS, w.plan.id, agent="shipper"))
        assert v.verdict == "allow" and v.reason == "current"
        # durable: on record before the answer; deferred: queued, written by closing the gate
        assert len(await find_decisions(astore, source="gate")) == (audit == "durable")
    assert v.scope == ("address/ana", "order/7")
    assert v.frontier == {"order/7": (w.order.id,), "address/ana": (w.address.id,)}
    [logged] = await find_decisions(astore, source="gate")
    assert logged.id == v.decision_id if audit == "durable" else v.decision_id is None
    assert (logged.verdict, logged.tool, logged.plan, logged.agent) == (
        "allow",
        "ship_order",
        w.plan.id,
        "shipper",
    )
    assert logged.payload["heads"] == {"order/7": w.order.id, "address/ana": w.address.id}
    assert logged.payload["frontier"]["order/7"] == [w.order.id]
    assert len(logged.payload["args_digest"]) == 64


async def test_revision_after_planning_asks_for_one_replan(astore: AsyncStore) -> None:
    w = await make_world(astore)
    r2 = await astore.put("order/7", {"status": "cancelled"}, author="sales", parents=[w.order.id])
    v = await Gate(astore, POLICY).check(ToolCall("ship_order", ARGS, w.plan.id))
    assert v.verdict == "replan" and v.reason == "stale_dependencies"
    [stale] = v.stale
    assert (stale.key, stale.used, stale.current) == ("order/7", (w.order.id,), r2.id)
    assert v.current_records["order/7"].value == {"status": "cancelled"}


async def test_replan_that_supersedes_is_allowed_then_blocked_when_stale_again(
    astore: AsyncStore,
) -> None:
    w = await make_world(astore)
    await astore.put("order/7", {"status": "held"}, author="sales")
    first = await Gate(astore, POLICY).check(ToolCall("ship_order", ARGS, w.plan.id))
    assert first.verdict == "replan"
    new_plan = await create_plan(
        astore,
        author="planner",
        parents=refreshed_parents(w.plan, first),
        supersedes=w.plan.id,
    )
    # A different gate instance (another process in production): the budget lives in the store.
    assert (
        await Gate(astore, POLICY).check(ToolCall("ship_order", ARGS, new_plan.id))
    ).verdict == "allow"
    await astore.put("order/7", {"status": "cancelled"}, author="sales")
    again = await Gate(astore, POLICY).check(ToolCall("ship_order", ARGS, new_plan.id))
    assert (again.verdict, again.reason) == ("block", "stale_after_replan")


async def test_a_plan_using_two_versions_of_a_key_is_stale(astore: AsyncStore) -> None:
    w = await make_world(astore)
    r2 = await astore.put("order/7", {"status": "confirmed", "n": 2}, author="sales")
    quote = await astore.add("quotes/7", {"price": 3}, author="pricer", parents=[w.order.id])
    plan = await create_plan(astore, author="planner", parents=[quote.id, r2.id, w.address.id])
    v = await Gate(astore, POLICY).check(ToolCall("ship_order", ARGS, plan.id))
    assert v.verdict == "replan"
    assert set(v.stale[0].used) == {w.order.id, r2.id}


async def test_frontier_walks_through_derived_records(astore: AsyncStore) -> None:
    w = await make_world(astore)
    quote = await astore.add("quotes/7", {"p": 1}, author="pricer", parents=[w.order.id])
    summary = await astore.add("summaries/7", {}, author="s", parents=[quote.id, w.address.id])
    plan = await create_plan(astore, author="planner", parents=[summary.id])
    assert (
        await Gate(astore, POLICY).check(ToolCall("ship_order", ARGS, plan.id))
    ).verdict == "allow"


@pytest.mark.parametrize(
    ("tool", "args", "plan", "reason"),
    [
        ("ship_order", ARGS, None, "missing_plan"),
        ("ship_order", ARGS, "", "missing_plan"),
        ("ship_order", ARGS, "not-a-plan-id", "unknown_plan"),
        ("ship_order", ARGS, 42, "unknown_plan"),
        ("ship_order", ARGS, "0" * 64, "unknown_plan"),
        ("delete_everything", ARGS, "PLAN", "undeclared_tool"),
        ("ship_order", {"order_id": "7"}, "PLAN", "scope_unresolved"),
        ("ship_order", {"order_id": {"x": 1}, "customer": "ana"}, "PLAN", "scope_unresolved"),
    ],
)
async def test_bad_calls_are_blocked(
    astore: AsyncStore, tool: str, args: dict[str, Any], plan: Any, reason: str
) -> None:
    w = await make_world(astore)
    plan_ref = w.plan.id if plan == "PLAN" else plan
    v = await Gate(astore, POLICY).check(ToolCall(tool, args, plan_ref))
    assert (v.verdict, v.reason) == ("block", reason)
    assert v.message
    [logged] = await find_decisions(astore, source="gate")
    assert (logged.verdict, logged.reason) == ("block", reason)


async def test_ungated_tool_is_allowed_without_a_plan(astore: AsyncStore) -> None:
    v = await Gate(astore, POLICY).check(ToolCall("get_weather", {"city": "Lisbon"}, None))
    assert (v.verdict, v.reason) == ("allow", "ungated")


async def test_record_that_is_not_a_plan_is_refused(astore: AsyncStore) -> None:
    w = await make_world(astore)
    v = await Gate(astore, POLICY).check(ToolCall("ship_order", ARGS, w.order.id))
    assert (v.verdict, v.reason) == ("block", "unknown_plan")


async def test_plan_that_never_read_a_dependency_is_blocked(astore: AsyncStore) -> None:
    w = await make_world(astore)
    plan = await create_plan(astore, author="planner", parents=[w.order.id])
    v = await Gate(astore, POLICY).check(ToolCall("ship_order", ARGS, plan.id))
    assert (v.verdict, v.reason) == ("block", "incomplete_lineage")
    assert "address/ana" in v.message


async def test_key_without_owner_is_blocked(astore: AsyncStore) -> None:
    w = await make_world(astore)
    orphan = await astore.add("address/bob", {"line": "x"}, author="bob")
    plan = await create_plan(astore, author="planner", parents=[w.order.id, orphan.id])
    v = await Gate(astore, POLICY).check(
        ToolCall("ship_order", {"order_id": "7", "customer": "bob"}, plan.id)
    )
    assert (v.verdict, v.reason) == ("block", "unknown_record")


async def test_lineage_over_the_bound_is_blocked(astore: AsyncStore) -> None:
    w = await make_world(astore)
    parent = w.order.id
    for i in range(12):
        parent = (await astore.add(f"steps/{i}", {}, author="p", parents=[parent])).id
    plan = await create_plan(astore, author="planner", parents=[parent, w.address.id])
    v = await Gate(astore, POLICY, max_records=8).check(ToolCall("ship_order", ARGS, plan.id))
    assert (v.verdict, v.reason) == ("block", "lineage_too_large")
    assert (
        await Gate(astore, POLICY).check(ToolCall("ship_order", ARGS, plan.id))
    ).verdict == "allow"


async def test_unknown_parent_in_lineage_is_blocked(sqlite_url: str) -> None:
    """A store that lost a record (restored from a partial backup) cannot prove lineage."""
    from planfence.shared_memory import create_async_store

    store = create_async_store(sqlite_url)
    async with store:
        w = await make_world(store)
        quote = await store.add("quotes/7", {}, author="p", parents=[w.order.id])
        plan = await create_plan(store, author="planner", parents=[quote.id, w.address.id])
    with sqlite3.connect(sqlite_url.removeprefix("sqlite:///")) as raw:
        raw.execute("DELETE FROM records WHERE id = ?", (w.order.id,))
    raw.close()
    store = create_async_store(sqlite_url)
    async with store:
        v = await Gate(store, POLICY).check(ToolCall("ship_order", ARGS, plan.id))
    assert (v.verdict, v.reason) == ("block", "unknown_record")
    assert w.order.id in v.message


async def test_tampered_record_is_blocked(sqlite_url: str) -> None:
    from planfence.shared_memory import create_async_store

    store = create_async_store(sqlite_url)
    async with store:
        w = await make_world(store)
    with sqlite3.connect(sqlite_url.removeprefix("sqlite:///")) as raw:
        raw.execute(
            "UPDATE records SET value = ? WHERE id = ?", ('{"status":"shipped"}', w.order.id)
        )
    raw.close()
    store = create_async_store(sqlite_url)
    async with store:
        v = await Gate(store, POLICY).check(ToolCall("ship_order", ARGS, w.plan.id))
    assert v.verdict == "block"
    assert v.reason == "unknown_record"
    assert "integrity" in v.message


@pytest.mark.parametrize("io", ["thread", "loop"])
@pytest.mark.parametrize(
    ("tamper", "reason"),
    [({"value_json": '{"ship":false}'}, "unknown_record"), (None, "unknown_plan")],
)
async def test_a_plan_changed_after_its_check_is_blocked_by_the_same_gate(
    sqlite_url: str, io: str, tamper: dict[str, str] | None, reason: str, audit: str
) -> None:
    # The gate remembers the plan's frontier, not the plan: its row is read (and its hash
    # checked) on every check, so corruption after the first check still blocks.
    from planfence.shared_memory import create_async_store

    store = create_async_store(f"{sqlite_url}?io={io}")
    async with store:
        w = await make_world(store)
        async with Gate(store, POLICY, audit=audit) as gate:
            assert (await gate.check(ToolCall("ship_order", ARGS, w.plan.id))).verdict == "allow"
            await store._tamper_record(w.plan.id, tamper)  # type: ignore[attr-defined]
            v = await gate.check(ToolCall("ship_order", ARGS, w.plan.id))
    assert (v.verdict, v.reason) == ("block", reason)


class FailingStore(AsyncStore):
    """A store whose backend is down: every read raises."""

    def __init__(self, inner: AsyncStore, fail_on: str) -> None:
        super().__init__()
        self.inner = inner
        self.fail_on = fail_on

    async def _write(self, batch):  # type: ignore[no-untyped-def]
        if self.fail_on == "write":
            raise StoreUnavailableError("disk gone")
        return await self.inner._write(batch)

    async def _read(self, ops):  # type: ignore[no-untyped-def]
        kinds = {type(op).__name__ for op in ops}
        if self.fail_on == "records" and kinds & {"GetRecords", "Lineage"}:
            raise StoreUnavailableError("connection reset")
        if self.fail_on == "keys" and "GetKeys" in kinds:
            raise StoreUnavailableError("connection reset")
        if self.fail_on == "decisions" and "QueryJournal" in kinds:
            raise RuntimeError("unexpected")
        return await self.inner._read(ops)


@pytest.mark.parametrize(
    ("fail_on", "reason"),
    [
        ("records", "store_unavailable"),
        ("keys", "store_unavailable"),
        ("write", "audit_unavailable"),
    ],
)
async def test_store_faults_block(
    astore: AsyncStore, audit: str, fail_on: str, reason: str
) -> None:
    w = await make_world(astore)
    gate = Gate(FailingStore(astore, fail_on), POLICY, audit=audit)
    v = await check_until_recorded(gate, ToolCall("ship_order", ARGS, w.plan.id))
    assert (v.verdict, v.reason) == ("block", reason)
    if fail_on == "write" and audit == "deferred":  # the allow it queued is lost, and says so
        with pytest.raises(AuditBacklogError):
            await gate.aclose()
    else:
        await gate.aclose()


@pytest.mark.parametrize("mode", ["off", *AUDIT_MODES])
async def test_unexpected_error_blocks(astore: AsyncStore, mode: str) -> None:
    w = await make_world(astore)
    await astore.put("order/7", {"status": "held"}, author="sales")
    replan = await Gate(astore, POLICY).check(ToolCall("ship_order", ARGS, w.plan.id))
    p2 = await create_plan(
        astore, author="planner", parents=refreshed_parents(w.plan, replan), supersedes=w.plan.id
    )
    v = await Gate(FailingStore(astore, "decisions"), POLICY, audit=mode).check(
        ToolCall("ship_order", ARGS, p2.id)
    )
    assert (v.verdict, v.reason) == ("block", "internal_error")


class ScriptedOwners:
    """A head source whose owners answer as scripted (faults included)."""

    def __init__(self, answers: Mapping[str, HeadAnswer] | Exception) -> None:
        self.answers = answers
        self.asked: list[Mapping[str, tuple[str, ...]]] = []

    async def heads(self, owners: Mapping[str, tuple[str, ...]]) -> Mapping[str, HeadAnswer]:
        self.asked.append(owners)
        if isinstance(self.answers, Exception):
            raise self.answers
        return self.answers

    async def aclose(self) -> None:
        return None


async def test_owner_heads_are_asked_per_owner_for_scope_keys_only(astore: AsyncStore) -> None:
    w = await make_world(astore)
    await astore.own("unrelated/1", "sales")
    src = ScriptedOwners(
        {"order/7": HeadAnswer(w.order.id), "address/ana": HeadAnswer(w.address.id)}
    )
    v = await Gate(astore, POLICY, heads=src).check(ToolCall("ship_order", ARGS, w.plan.id))
    assert v.verdict == "allow"
    assert src.asked == [{"ana": ("address/ana",), "sales": ("order/7",)}]


@pytest.mark.parametrize(
    ("answers", "reason"),
    [
        ({}, "owner_unreachable"),
        ({"order/7": HeadAnswer(error="owner_unreachable", detail="timeout")}, "owner_unreachable"),
        ({"order/7": HeadAnswer(error="owner_unauthenticated")}, "owner_unauthenticated"),
        ({"order/7": HeadAnswer(error="something new")}, "owner_unreachable"),
        (ConnectionError("refused"), "internal_error"),
    ],
)
async def test_owner_faults_block(
    astore: AsyncStore, audit: str, answers: dict[str, HeadAnswer] | Exception, reason: str
) -> None:
    w = await make_world(astore)
    if isinstance(answers, dict):
        answers = {"address/ana": HeadAnswer(w.address.id), **answers}
    async with Gate(astore, POLICY, heads=ScriptedOwners(answers), audit=audit) as gate:
        v = await check_until_recorded(gate, ToolCall("ship_order", ARGS, w.plan.id))
    assert (v.verdict, v.reason) == ("block", reason)


async def test_executor_loop_replans_once_and_runs_new_arguments(astore: AsyncStore) -> None:
    w = await make_world(astore)
    await astore.put("address/ana", {"line": "9 Hill Rd"}, author="ana")
    ran: list[Mapping[str, Any]] = []
    replans: list[Verdict] = []

    async def ship(args: Mapping[str, Any]) -> str:
        ran.append(args)
        return "shipped"

    async def replan(v: Verdict) -> Replanned:
        replans.append(v)
        p2 = await create_plan(
            astore, author="planner", parents=refreshed_parents(w.plan, v), supersedes=w.plan.id
        )
        return Replanned(p2.id, {**ARGS, "line": v.current_records["address/ana"].value["line"]})

    seam = GateMiddleware(astore, POLICY, gate=Gate(astore, POLICY))
    out = await seam.run(ToolCall("ship_order", ARGS, w.plan.id), ship, replan)
    assert out.executed and out.result == "shipped" and out.replans == 1
    assert ran == [{**ARGS, "line": "9 Hill Rd"}]
    assert [v.verdict for v in out.verdicts] == ["replan", "allow"]


async def test_executor_loop_blocks_when_replan_is_stale_too(astore: AsyncStore) -> None:
    w = await make_world(astore)
    await astore.put("address/ana", {"line": "9 Hill Rd"}, author="ana")
    ran: list[Mapping[str, Any]] = []

    async def ship(args: Mapping[str, Any]) -> None:
        ran.append(args)

    async def lazy_replan(v: Verdict) -> Replanned:
        # A planner that ignores the fresh records and re-issues its old reads: still stale.
        p2 = await create_plan(astore, author="planner", parents=w.plan.parents)
        return Replanned(p2.id, ARGS)

    seam = GateMiddleware(astore, POLICY, gate=Gate(astore, POLICY))
    out = await seam.run(ToolCall("ship_order", ARGS, w.plan.id), ship, lazy_replan)
    assert not out.executed and ran == []
    assert (out.final.verdict, out.final.reason) == ("block", "stale_after_replan")


def test_every_block_reason_is_documented() -> None:
    assert {
        "missing_plan",
        "unknown_plan",
        "unknown_record",
        "incomplete_lineage",
        "undeclared_tool",
        "scope_unresolved",
        "owner_unreachable",
        "owner_unauthenticated",
        "stale_after_replan",
        "lineage_too_large",
    } <= BLOCK_REASONS


async def test_a_trailing_newline_in_an_argument_cannot_reach_a_twin_key(
    astore: AsyncStore,
) -> None:
    # "7\n" once filled the scope with a twin key `order/7\n` another agent could own.
    w = await make_world(astore)
    with pytest.raises(InvalidKeyError):
        await astore.own("order/7\n", "mallory")
    args = {"order_id": "7\n", "customer": "ana"}
    v = await Gate(astore, POLICY).check(ToolCall("ship_order", args, w.plan.id))
    assert (v.verdict, v.reason) == ("block", "scope_unresolved")


@pytest.mark.parametrize("audit", [True, "deferred", False])
async def test_concurrent_checks_on_one_gate_each_see_their_own_plan(
    astore: AsyncStore, audit: Any
) -> None:
    # The store is the head source, read with each plan's own snapshot: checks running side by
    # side on one gate must not answer one plan's heads from another plan's read.
    import asyncio

    w = await make_world(astore)
    await astore.put("address/ana", {"line": "9 Hill Rd"}, author="ana", parents=[w.address.id])
    fresh = await astore.get_many([(await astore.head("address/ana")) or ""])
    current = await create_plan(
        astore, author="planner", parents=[w.order.id, *fresh], value={"ship": True}
    )
    gate = Gate(astore, POLICY, audit=audit)
    plans = [w.plan.id, current.id] * 5
    verdicts = await asyncio.gather(*(gate.check(ToolCall("ship_order", ARGS, p)) for p in plans))
    assert [v.verdict for v in verdicts] == ["replan", "allow"] * 5


@pytest.mark.parametrize("depth", [1, 40])
async def test_a_plan_checked_before_reads_its_row_and_the_heads_whatever_its_depth(
    depth: int,
) -> None:
    from planfence.shared_memory import create_async_store

    store = create_async_store("memory://")
    await store.own("order/7", "sales")
    await store.own("address/ana", "ana")
    order = await store.put("order/7", {"status": "confirmed"}, author="sales")
    address = await store.put("address/ana", {"line": "1 Harbour St"}, author="ana")
    parents = [order.id, address.id]
    for i in range(depth):  # a chain of derived records between the facts and the plan
        note = await create_plan(store, author="planner", parents=parents, value={"step": i})
        parents = [note.id]
    plan = await create_plan(store, author="planner", parents=parents, value={"ship": True})
    asked: list[list[str]] = []
    read = store._read

    async def spy(ops: Any) -> Any:
        asked.append([type(op).__name__ for op in ops])
        return await read(ops)

    store._read = spy  # type: ignore[method-assign]
    gate = Gate(store, POLICY)
    assert (await gate.check(ToolCall("ship_order", ARGS, plan.id))).verdict == "allow"
    first = [name for batch in asked for name in batch]
    asked.clear()
    assert (await gate.check(ToolCall("ship_order", ARGS, plan.id))).verdict == "allow"
    assert asked == [["GetRecords", "GetKeys"]]  # the plan's row (hash checked) and the heads
    assert len(first) > 2  # the first check walked the lineage
