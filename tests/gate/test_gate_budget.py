"""The one-replan budget and other fail-closed edges found in review: each test failed before
its fix."""

from __future__ import annotations

import sqlite3
from typing import Any

import pytest
from audit_modes import check_until_recorded

from planfence.plugins.gate import (
    Gate,
    Policy,
    PolicyError,
    ScopeError,
    ToolCall,
    ToolPolicy,
    create_plan,
)
from planfence.plugins.gate.audit_writer import AuditBacklogError
from planfence.plugins.gate.policy import KeyTemplate
from planfence.shared_memory import (
    AsyncStore,
    QueryJournal,
    Record,
    StoreUnavailableError,
    create_async_store,
)
from planfence.shared_memory.errors import InvalidValueError

POLICY = Policy.from_toml(
    """
[tools.ship]
depends_on = ["order/{id}"]

[tools.peek]
ungated = true
"""
)
ARGS = {"id": "7"}


async def seed(store: AsyncStore) -> tuple[Record, Record]:
    await store.own("order/7", "sales")
    order = await store.put("order/7", {"n": 0}, author="sales")
    plan = await create_plan(store, author="planner", parents=[order.id])
    return order, plan


async def revise(store: AsyncStore, n: int) -> Record:
    return await store.put("order/7", {"n": n}, author="sales")


async def replan_from(store: AsyncStore, old: Record) -> Record:
    head = await store.head("order/7")
    assert head is not None
    return await create_plan(store, author="planner", parents=[head], supersedes=old.id)


@pytest.mark.parametrize("audit", [True, "deferred", False])
async def test_budget_holds_along_the_whole_supersedes_chain(
    astore: AsyncStore, audit: Any
) -> None:
    _, a = await seed(astore)
    gate = Gate(astore, POLICY, audit=audit)
    await revise(astore, 1)
    assert (await gate.check(ToolCall("ship", ARGS, a.id))).verdict == "replan"
    b = await replan_from(astore, a)
    await revise(astore, 2)
    vb = await gate.check(ToolCall("ship", ARGS, b.id))
    assert (vb.verdict, vb.reason) == ("block", "stale_after_replan")
    # C supersedes B, which was refused as stale (blocked): still no second replan.
    c = await replan_from(astore, b)
    await revise(astore, 3)
    vc = await gate.check(ToolCall("ship", ARGS, c.id))
    assert (vc.verdict, vc.reason) == ("block", "stale_after_replan")


async def test_ungated_calls_cannot_flush_a_refusal_out_of_the_budget(astore: AsyncStore) -> None:
    _, a = await seed(astore)
    gate = Gate(astore, POLICY)
    await revise(astore, 1)
    assert (await gate.check(ToolCall("ship", ARGS, a.id))).verdict == "replan"
    for _ in range(60):  # read-only calls carrying the same plan id are logged too
        assert (await gate.check(ToolCall("peek", {}, a.id))).verdict == "allow"
    b = await replan_from(astore, a)
    await revise(astore, 2)
    assert (await gate.check(ToolCall("ship", ARGS, b.id))).reason == "stale_after_replan"


async def test_a_gated_tool_with_an_empty_scope_is_blocked(astore: AsyncStore) -> None:
    _, plan = await seed(astore)
    await revise(astore, 1)  # the plan is stale
    empty = ToolPolicy.__new__(ToolPolicy)  # bypass validation, as a hand-built policy could
    object.__setattr__(empty, "name", "wire_money")
    object.__setattr__(empty, "depends_on", ())
    object.__setattr__(empty, "ungated", False)
    v = await Gate(astore, Policy({"wire_money": empty})).check(ToolCall("wire_money", {}, plan.id))
    assert (v.verdict, v.reason) == ("block", "undeclared_tool")


def test_tool_policies_must_declare_dependencies_or_be_ungated() -> None:
    with pytest.raises(PolicyError, match="declare depends_on"):
        ToolPolicy("wire_money")
    with pytest.raises(PolicyError, match="not both"):
        ToolPolicy("x", (KeyTemplate.parse("a/{b}"),), ungated=True)


def test_argument_values_are_never_read_as_placeholders() -> None:
    tool = Policy().declare("t", ["order/{a}-{b}"]).get("t")
    assert tool is not None
    with pytest.raises(ScopeError, match="invalid key"):  # "{b}" is not a key character
        tool.scope({"a": "{b}", "b": "7"})
    assert tool.scope({"a": "x", "b": "7"}) == ("order/x-7",)


def test_braces_in_arguments_give_an_invalid_key() -> None:
    tool = Policy().declare("t", ["order/{a}{b}"]).get("t")
    assert tool is not None
    from planfence.plugins.gate import ScopeError

    with pytest.raises(ScopeError, match="invalid key"):
        tool.scope({"a": "{b}", "b": "7"})


async def test_a_locked_sqlite_store_blocks_and_raises_typed_errors(
    tmp_path: Any, audit: str
) -> None:
    url = f"sqlite:///{tmp_path / 's.db'}"
    store = create_async_store(url)
    await store.setup()
    _, plan = await seed(store)
    await store.aclose()
    from planfence.shared_memory.backends.sqlite import SQLiteStore

    locked = SQLiteStore(tmp_path / "s.db", busy_timeout=0.05)
    holder = sqlite3.connect(tmp_path / "s.db", isolation_level=None)
    try:
        await locked.setup()
        holder.execute("BEGIN EXCLUSIVE")
        # WAL readers still see the plan, so the decision is reached; it cannot be recorded,
        # and an unrecorded allow must not let the call run.
        gate = Gate(locked, POLICY, audit=audit)
        v = await check_until_recorded(gate, ToolCall("ship", ARGS, plan.id))
        assert (v.verdict, v.reason) == ("block", "audit_unavailable")
        if audit == "deferred":  # the allow it queued cannot be written, and closing says so
            with pytest.raises(AuditBacklogError, match="locked"):
                await gate.aclose()
        with pytest.raises(StoreUnavailableError, match="locked"):
            await locked.put("order/7", {"n": 9}, author="sales")
    finally:
        holder.execute("ROLLBACK")
        holder.close()
        await locked.aclose()


async def test_a_closed_store_says_so(tmp_path: Any) -> None:
    store = create_async_store(f"sqlite:///{tmp_path / 's.db'}")
    await store.setup()
    await store.aclose()
    with pytest.raises(StoreUnavailableError, match="closed"):
        await store.keys()


async def test_budget_follows_the_chain_through_plans_that_only_made_ungated_calls(
    astore: AsyncStore,
) -> None:
    _, a = await seed(astore)
    gate = Gate(astore, POLICY)
    await revise(astore, 1)
    assert (await gate.check(ToolCall("ship", ARGS, a.id))).verdict == "replan"
    b = await replan_from(astore, a)
    assert (await gate.check(ToolCall("peek", {}, b.id))).reason == "ungated"  # no gated allow
    c = await replan_from(astore, b)
    await revise(astore, 2)
    v = await gate.check(ToolCall("ship", ARGS, c.id))
    assert (v.verdict, v.reason) == ("block", "stale_after_replan")


@pytest.mark.parametrize("audit", [True, "deferred"])
async def test_a_gated_allow_restores_the_budget(astore: AsyncStore, audit: Any) -> None:
    _, a = await seed(astore)
    gate = Gate(astore, POLICY, audit=audit)
    await revise(astore, 1)
    assert (await gate.check(ToolCall("ship", ARGS, a.id))).verdict == "replan"
    b = await replan_from(astore, a)
    assert (await gate.check(ToolCall("ship", ARGS, b.id))).reason == "current"  # the replan acted
    c = await replan_from(astore, b)
    d = await replan_from(astore, c)  # a later plan in the same chain
    await revise(astore, 2)
    assert (await gate.check(ToolCall("ship", ARGS, d.id))).verdict == "replan"


async def test_an_unreadable_chain_blocks(astore: AsyncStore, audit: str) -> None:
    _, a = await seed(astore)
    await revise(astore, 1)
    b = await replan_from(astore, a)
    await revise(astore, 2)

    class JournalDown(AsyncStore):
        """The store, except that its audit journal cannot be read (the budget's reads)."""

        def __init__(self, inner: AsyncStore) -> None:
            super().__init__()
            self.inner = inner

        async def _write(self, batch):  # type: ignore[no-untyped-def]
            return await self.inner._write(batch)

        async def _read(self, ops):  # type: ignore[no-untyped-def]
            if any(isinstance(op, QueryJournal) for op in ops):
                raise StoreUnavailableError("down")
            return await self.inner._read(ops)

    async with Gate(JournalDown(astore), POLICY, audit=audit) as gate:
        v = await gate.check(ToolCall("ship", ARGS, b.id))
    assert (v.verdict, v.reason) == ("block", "store_unavailable")


async def test_a_plan_supersedes_only_a_plan(astore: AsyncStore) -> None:
    """A replan that names a fact as the plan it replaces would start a chain the budget cannot
    follow: refused before anything is written, from the API as from the CLI."""
    order, plan = await seed(astore)
    seq = await astore.last_seq()
    with pytest.raises(InvalidValueError, match=r"is a fact of order/7, not a plan"):
        await create_plan(astore, author="planner", parents=[order.id], supersedes=order.id)
    assert await astore.last_seq() == seq
    replan = await create_plan(astore, author="planner", parents=[order.id], supersedes=plan.id)
    assert replan.supersedes == plan.id
