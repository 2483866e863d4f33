"""A repeated check (`repeats`): the allow given before, when the plan is still stored and every
key of D(a) has the head and owner epoch it was given on; anything else goes the full way."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from planfence.plugins.gate import Gate, Policy, ToolCall, create_plan
from planfence.plugins.gate.audit import AUDIT_SOURCE
from planfence.plugins.gate.call import args_digest
from planfence.plugins.gate.values import value_digests
from planfence.shared_memory import AsyncStore, Record, StoreUnavailableError, create_async_store

POLICY = Policy.from_toml('[tools.ship]\ndepends_on = ["order/{id}", "stock/main"]\n')
ARGS = {"id": "7"}
KEYS = ("order/7", "stock/main")


async def seed(store: AsyncStore) -> Record:
    parents = []
    for key in KEYS:
        await store.own(key, "sales")
        parents.append((await store.put(key, {"n": 0}, author="sales")).id)
    return await create_plan(store, author="planner", parents=parents)


class Reads:
    """Counts the store's read batches and can make them fail (and its reads-and-write
    transactions, which a backend may run without its batch read)."""

    def __init__(self, store: AsyncStore) -> None:
        self.batches: list[list[str]] = []
        self.down = False
        self._read = store._read
        store._read = self  # type: ignore[method-assign]
        transact = store._transact

        async def failing(*args: Any, **kw: Any) -> Any:
            if self.down:
                raise StoreUnavailableError("injected: the store cannot be read")
            return await transact(*args, **kw)

        store._transact = failing  # type: ignore[method-assign]

    async def __call__(self, ops: Any) -> Any:
        if self.down:
            raise StoreUnavailableError("injected: the store cannot be read")
        self.batches.append([type(op).__name__ for op in ops])
        return await self._read(ops)


def same_allow(a: Any, b: Any) -> bool:
    fields = ("verdict", "reason", "scope", "frontier", "heads", "epochs", "args_digest", "plan")
    return all(getattr(a, f) == getattr(b, f) for f in fields)


async def test_a_repeated_allow_reads_the_plan_and_the_heads_once(astore: AsyncStore) -> None:
    plan = await seed(astore)
    reads = Reads(astore)
    async with Gate(astore, POLICY) as gate:
        first = await gate.check(ToolCall("ship", ARGS, plan.id))
        reads.batches.clear()
        again = [await gate.check(ToolCall("ship", ARGS, plan.id)) for _ in range(3)]
    assert first.allowed and all(same_allow(first, v) for v in again)
    assert reads.batches[:3] == [["GetRecords", "GetKeys"]] * 3  # one batch per check


async def test_other_arguments_naming_the_same_keys_repeat_the_allow_with_their_digests(
    astore: AsyncStore,
) -> None:
    plan = await seed(astore)
    reads = Reads(astore)
    async with Gate(astore, POLICY) as gate:
        first = await gate.check(ToolCall("ship", {**ARGS, "note": "a"}, plan.id))
        reads.batches.clear()
        second = await gate.check(ToolCall("ship", {**ARGS, "note": "b"}, plan.id))
    assert first.allowed and second.allowed
    assert reads.batches == [["GetRecords", "GetKeys"]]  # repeated: one read
    assert second.args_digest == args_digest({**ARGS, "note": "b"}) != first.args_digest
    assert second.value_digests == value_digests({**ARGS, "note": "b"})
    assert (second.heads, second.epochs, second.scope) == (first.heads, first.epochs, first.scope)


async def test_every_repeated_allow_is_on_record(astore: AsyncStore) -> None:
    plan = await seed(astore)
    async with Gate(astore, POLICY) as gate:
        for _ in range(5):
            assert (await gate.check(ToolCall("ship", ARGS, plan.id))).allowed
    assert len(await astore.journal(kind=AUDIT_SOURCE, limit=100)) == 5


async def test_a_head_that_moved_ends_the_repeat(astore: AsyncStore) -> None:
    plan = await seed(astore)
    async with Gate(astore, POLICY) as gate:
        assert (await gate.check(ToolCall("ship", ARGS, plan.id))).allowed
        await astore.put("stock/main", {"n": 1}, author="sales", parents=[])
        moved = await gate.check(ToolCall("ship", ARGS, plan.id))
        assert gate.repeats is not None and len(gate.repeats) == 0
    assert (moved.verdict, moved.reason) == ("replan", "stale_dependencies")
    assert [s.key for s in moved.stale] == ["stock/main"]


async def test_an_owner_epoch_that_moved_is_judged_again(astore: AsyncStore) -> None:
    plan = await seed(astore)
    async with Gate(astore, POLICY) as gate:
        first = await gate.check(ToolCall("ship", ARGS, plan.id))
        await astore.transfer("order/7", "billing", by="sales")
        after = await gate.check(ToolCall("ship", ARGS, plan.id))
    assert first.epochs["order/7"] == 1 and after.epochs["order/7"] == 2  # judged anew
    assert after.allowed  # the head stayed: the plan is still current


async def test_a_plan_gone_from_the_store_is_not_repeated(astore: AsyncStore) -> None:
    plan = await seed(astore)
    async with Gate(astore, POLICY) as gate:
        assert (await gate.check(ToolCall("ship", ARGS, plan.id))).allowed
        await astore._tamper_record(plan.id, None)  # type: ignore[attr-defined]
        gone = await gate.check(ToolCall("ship", ARGS, plan.id))
    assert (gone.verdict, gone.reason) == ("block", "unknown_plan")


async def test_a_read_that_fails_blocks(astore: AsyncStore, audit: str) -> None:
    plan = await seed(astore)
    reads = Reads(astore)
    gate = Gate(astore, POLICY, audit=audit)  # type: ignore[arg-type]
    try:
        assert (await gate.check(ToolCall("ship", ARGS, plan.id))).allowed
        reads.down = True
        failed = await gate.check(ToolCall("ship", ARGS, plan.id))
        reads.down = False
    finally:
        await gate.aclose()
    assert (failed.verdict, failed.reason) == ("block", "store_unavailable")


async def test_other_arguments_agents_and_a_new_policy_are_separate_calls(
    astore: AsyncStore,
) -> None:
    plan = await seed(astore)
    await astore.own("order/8", "sales")
    await astore.put("order/8", {"n": 0}, author="sales")
    async with Gate(astore, POLICY) as gate:
        assert (await gate.check(ToolCall("ship", ARGS, plan.id, agent="a"))).allowed
        other = await gate.check(ToolCall("ship", {"id": "8"}, plan.id, agent="a"))
        assert (other.verdict, other.reason) == ("block", "incomplete_lineage")
        assert (await gate.check(ToolCall("ship", ARGS, plan.id, agent="b"))).allowed
        assert gate.repeats is not None and len(gate.repeats) == 2
        gate.policy = Policy.from_toml('[tools.ship]\ndepends_on = ["order/{id}", "audit/x"]\n')
        changed = await gate.check(ToolCall("ship", ARGS, plan.id, agent="a"))
    assert (changed.verdict, changed.reason) == ("block", "incomplete_lineage")  # of audit/x


async def test_a_durable_gate_writes_each_allow_with_its_reads(astore: AsyncStore) -> None:
    plan = await seed(astore)
    async with Gate(astore, POLICY, audit="durable") as gate:
        assert gate.repeats is None
        for _ in range(2):
            assert (await gate.check(ToolCall("ship", ARGS, plan.id))).decision_id is not None


# Each step: a write that may move a key's head or owner, then a check of one of two plans.
STEP = st.tuples(
    st.sampled_from(["none", "put", "transfer"]), st.sampled_from(KEYS), st.integers(0, 1)
)


async def differential(url: str, steps: list[Any]) -> None:
    store = create_async_store(url)
    owners = dict.fromkeys(KEYS, "sales")
    try:
        first = await seed(store)
        heads = [s.head for s in (await store.states(KEYS)).values() if s.head]
        plans = [first.id, (await create_plan(store, author="planner", parents=heads)).id]
        async with Gate(store, POLICY, audit="off") as gate:
            for n, (write, key, which) in enumerate(steps):
                if write == "put":
                    await store.put(key, {"step": n}, author=owners[key], parents=[])
                elif write == "transfer":
                    new = "billing" if owners[key] == "sales" else "sales"
                    await store.transfer(key, new, by=owners[key])
                    owners[key] = new
                async with Gate(store, POLICY, audit="off") as fresh:
                    expected = await fresh.preview(ToolCall("ship", ARGS, plans[which]))
                got = await gate.check(ToolCall("ship", ARGS, plans[which]))
                assert (got.verdict, got.reason, got.heads, got.epochs) == (
                    expected.verdict,
                    expected.reason,
                    expected.heads,
                    expected.epochs,
                )
    finally:
        await store.aclose()


@pytest.mark.parametrize("backend", ["memory", "sqlite"])
@settings(
    max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(steps=st.lists(STEP, min_size=1, max_size=12))
def test_a_repeat_answers_what_the_full_check_answers(
    backend: str, tmp_path_factory: pytest.TempPathFactory, steps: list[Any]
) -> None:
    """Whatever heads and owners move between checks, a gate that remembers its allows answers
    what a gate seeing the call for the first time answers."""
    url = "memory://"
    if backend == "sqlite":
        url = f"sqlite:///{tmp_path_factory.mktemp('repeats') / 'store.db'}"
    asyncio.run(differential(url, steps))
