"""`Gate(audit="deferred")`: allows are written in batches just after the answer, refusals before
it; a journal that cannot be written turns later allows into blocks, and nothing queued is lost."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from planfence.plugins.gate import Gate, Policy, ToolCall, create_plan
from planfence.plugins.gate.audit import AUDIT_SOURCE
from planfence.plugins.gate.audit_writer import AuditBacklogError
from planfence.shared_memory import AsyncStore, Record, StoreUnavailableError, create_async_store

POLICY = Policy.from_toml('[tools.ship]\ndepends_on = ["order/{id}"]\n')
ARGS = {"id": "7"}


async def seed(store: AsyncStore) -> Record:
    await store.own("order/7", "sales")
    order = await store.put("order/7", {"n": 0}, author="sales")
    return await create_plan(store, author="planner", parents=[order.id])


async def gate_entries(store: AsyncStore) -> list[Any]:
    return list(await store.journal(kind=AUDIT_SOURCE, limit=1000))


class FlakyWrites:
    """Wraps a store's write primitive: fails while `down` is set (a disk full, a lost server)."""

    def __init__(self, store: AsyncStore) -> None:
        self.down = False
        self._write = store._write
        store._write = self  # type: ignore[method-assign]

    async def __call__(self, batch: Any) -> Any:
        if self.down:
            raise StoreUnavailableError("injected: the journal cannot be written")
        return await self._write(batch)


async def test_allows_are_recorded_after_the_answer_and_refusals_before(astore: AsyncStore) -> None:
    plan = await seed(astore)
    gate = Gate(astore, POLICY, audit="deferred")
    allows = [await gate.check(ToolCall("ship", ARGS, plan.id)) for _ in range(5)]
    assert all(v.verdict == "allow" and v.decision_id is None for v in allows)
    blocked = await gate.check(
        ToolCall("ship", ARGS, "f" * 64)
    )  # no such plan: refused, on record now
    assert blocked.verdict == "block" and blocked.decision_id is not None
    await gate.aclose()
    entries = await gate_entries(astore)
    assert sorted(e.labels["verdict"] for e in entries) == ["allow"] * 5 + ["block"]
    assert {e.subject for e in entries if e.labels["verdict"] == "allow"} == {plan.id}


async def test_the_writer_batches_without_being_closed(astore: AsyncStore) -> None:
    plan = await seed(astore)
    gate = Gate(astore, POLICY, audit="deferred")
    for _ in range(20):
        assert (await gate.check(ToolCall("ship", ARGS, plan.id))).allowed
    assert gate.deferred is not None
    for _ in range(200):  # written within max_delay by the background task, no flush asked
        if gate.deferred.written == 20:
            break
        await asyncio.sleep(0.01)
    assert gate.deferred.written == 20 and len(await gate_entries(astore)) == 20
    await gate.aclose()


async def test_a_journal_that_cannot_be_written_blocks_later_allows_and_loses_nothing(
    tmp_path: Any,
) -> None:
    store = create_async_store(f"sqlite:///{tmp_path / 's.db'}")
    plan = await seed(store)
    flaky = FlakyWrites(store)
    gate = Gate(store, POLICY, audit="deferred")
    assert gate.deferred is not None
    assert (await gate.check(ToolCall("ship", ARGS, plan.id))).allowed
    flaky.down = True
    with pytest.raises(AuditBacklogError):
        await gate.deferred.flush()
    v = await gate.check(ToolCall("ship", ARGS, plan.id))
    assert (v.verdict, v.reason) == ("block", "audit_unavailable")
    assert "not being written" in v.message
    flaky.down = False
    await gate.deferred.flush()  # the batch that failed is written now
    assert (await gate.check(ToolCall("ship", ARGS, plan.id))).allowed
    await gate.aclose()
    entries = await gate_entries(store)
    assert sorted(e.labels["verdict"] for e in entries) == [
        "allow",
        "allow",
    ]  # the block had no record
    await store.aclose()


async def test_a_full_queue_blocks(astore: AsyncStore) -> None:
    plan = await seed(astore)
    gate = Gate(astore, POLICY, audit="deferred")
    assert gate.deferred is not None
    gate.deferred.max_pending = 3
    gate.deferred.max_delay = 60.0  # the writer sleeps through the test
    verdicts = [await gate.check(ToolCall("ship", ARGS, plan.id)) for _ in range(4)]
    assert [v.verdict for v in verdicts] == ["allow"] * 3 + ["block"]
    assert verdicts[-1].reason == "audit_unavailable"
    await gate.aclose()
    assert len(await gate_entries(astore)) == 3


async def test_a_closed_writer_refuses(astore: AsyncStore) -> None:
    plan = await seed(astore)
    gate = Gate(astore, POLICY, audit="deferred")
    assert gate.deferred is not None
    await gate.deferred.aclose()
    v = await gate.check(ToolCall("ship", ARGS, plan.id))
    assert (v.verdict, v.reason) == ("block", "audit_unavailable")


def test_a_gate_used_from_one_loop_after_another_records_every_allow(tmp_path: Any) -> None:
    # asyncio.run per call: each loop ends with the writer's task cancelled, and the next call
    # must start a writer on its own loop, with the earlier queue still in it.
    async def setup() -> tuple[AsyncStore, Record]:
        store = create_async_store(f"sqlite:///{tmp_path / 's.db'}")
        return store, await seed(store)

    store, plan = asyncio.run(setup())
    gate = Gate(store, POLICY, audit="deferred")
    for _ in range(4):
        assert asyncio.run(gate.check(ToolCall("ship", ARGS, plan.id))).allowed
    asyncio.run(gate.aclose())

    async def count() -> int:
        try:
            return len(await gate_entries(store))
        finally:
            await store.aclose()

    assert asyncio.run(count()) == 4


async def test_a_write_that_hangs_blocks_allows_after_max_wait(astore: AsyncStore) -> None:
    plan = await seed(astore)
    gate = Gate(astore, POLICY, audit="deferred")
    assert gate.deferred is not None
    gate.deferred.max_wait = 0.2
    release = asyncio.Event()
    write = astore._write

    async def hung(batch: Any) -> Any:
        await release.wait()
        return await write(batch)

    astore._write = hung  # type: ignore[method-assign]
    assert (await gate.check(ToolCall("ship", ARGS, plan.id))).allowed
    await asyncio.sleep(0.3)
    v = await gate.check(ToolCall("ship", ARGS, plan.id))
    assert (v.verdict, v.reason) == ("block", "audit_unavailable")
    assert "waited" in v.message
    release.set()
    astore._write = write  # type: ignore[method-assign]
    await gate.aclose()
    assert len(await gate_entries(astore)) == 1


async def test_a_write_whose_outcome_is_unknown_is_not_written_twice(astore: AsyncStore) -> None:
    plan = await seed(astore)
    gate = Gate(astore, POLICY, audit="deferred")
    assert gate.deferred is not None
    write = astore._write
    lost: list[bool] = [True]

    async def commits_then_fails(batch: Any) -> Any:
        result = await write(batch)
        if lost[0] and batch.entries:
            lost[0] = False
            raise StoreUnavailableError("injected: connection lost after COMMIT")
        return result

    astore._write = commits_then_fails  # type: ignore[method-assign]
    for _ in range(3):
        assert (await gate.check(ToolCall("ship", ARGS, plan.id))).allowed
    with pytest.raises(AuditBacklogError):
        await gate.deferred.flush()
    await gate.deferred.flush()  # looks the batch up: it landed, so it is not written again
    assert gate.deferred.written == 3 and gate.deferred.pending == 0
    await gate.aclose()
    assert len(await gate_entries(astore)) == 3


async def test_closing_twice_at_once_writes_each_allow_once(astore: AsyncStore) -> None:
    plan = await seed(astore)
    gate = Gate(astore, POLICY, audit="deferred")
    assert gate.deferred is not None
    gate.deferred.max_batch = 2
    write = astore._write

    async def slow(batch: Any) -> Any:
        await asyncio.sleep(0.02)
        return await write(batch)

    astore._write = slow  # type: ignore[method-assign]
    for _ in range(5):
        assert (await gate.check(ToolCall("ship", ARGS, plan.id))).allowed
    await asyncio.gather(gate.aclose(), gate.aclose())
    entries = await gate_entries(astore)
    assert len(entries) == 5
    assert len({e.id for e in entries}) == 5


def test_audit_takes_true_false_or_deferred() -> None:
    store = create_async_store("memory://")
    with pytest.raises(ValueError, match="deferred"):
        Gate(store, POLICY, audit="later")  # type: ignore[arg-type]


async def test_a_caller_that_never_yields_the_loop_still_gets_its_allows_written(
    tmp_path: Any,
) -> None:
    # On a SQLite store on the loop, a check never suspends: a tight loop of checks would starve
    # the writer task, and after `max_wait` every allow would block. The gate writes the overdue
    # batch itself instead.
    store = create_async_store(f"sqlite:///{tmp_path / 's.db'}?io=loop")
    try:
        plan = await seed(store)
        gate = Gate(store, POLICY, audit="deferred")
        assert gate.deferred is not None
        # max_wait leaves room for a busy machine that does not schedule this process for a
        # while (which is not what is tested); the loop runs longer than max_wait all the same.
        gate.deferred.max_delay, gate.deferred.max_wait = 0.01, 1.5
        loop = asyncio.get_running_loop()
        until = loop.time() + 2.0
        verdicts = []
        while loop.time() < until:
            verdicts.append(await gate.check(ToolCall("ship", ARGS, plan.id)))
        assert {(v.verdict, v.reason, v.message) for v in verdicts if not v.allowed} == set()
        assert gate.deferred.written > 0  # written while the checks ran, not only at close
        await gate.aclose()
        entries = await store.journal(kind=AUDIT_SOURCE, limit=len(verdicts) + 1)
        assert len(entries) == len(verdicts)
    finally:
        await store.aclose()
