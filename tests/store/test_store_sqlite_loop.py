"""SQLite with its calls on the event loop (`io=loop`): no hand-off to the store's thread, and
never a loop that sleeps on another process's lock (a write that must wait goes to the thread).
The conformance suite runs on it too (`test_store_conformance`)."""

from __future__ import annotations

import asyncio
import sqlite3
import threading
import time
from collections.abc import AsyncIterator, Awaitable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any, TypeVar

import pytest
from audit_modes import check_until_recorded

from planfence.plugins.gate import Gate, Policy, ToolCall, create_plan
from planfence.plugins.gate.audit_writer import AuditBacklogError
from planfence.shared_memory import ConfigError, Record, StoreUnavailableError, create_async_store
from planfence.shared_memory.backends.sqlite import SQLiteStore
from planfence.shared_memory.factory import sqlite_on_loop

T = TypeVar("T")
POLICY = Policy.from_toml('[tools.ship]\ndepends_on = ["order/{id}"]\n')
ARGS = {"id": "7"}


async def _while_ticking(
    work: Awaitable[T], release: Any, hold_for: float = 0.2
) -> tuple[T, float]:
    """Await `work` while the loop ticks every 10 ms; call `release` after `hold_for` seconds.
    Returns the result and the longest gap between two ticks (a stalled loop shows here)."""
    task = asyncio.ensure_future(work)
    gaps: list[float] = []
    start = last = time.monotonic()
    released = False
    while not task.done():
        await asyncio.sleep(0.01)
        now = time.monotonic()
        gaps.append(now - last)
        last = now
        if not released and now - start >= hold_for:
            assert not task.done(), "the work finished while the lock was held"
            release()
            released = True
    return await task, max(gaps)


async def test_calls_run_on_the_loop_with_io_loop_and_on_the_store_thread_by_default(
    tmp_path: Path,
) -> None:
    for io, on_loop in (("loop", True), ("thread", False)):
        store = create_async_store(f"sqlite:///{tmp_path / io}.db?io={io}")
        await store.setup()
        try:
            ident = await store._call(lambda conn: threading.get_ident())  # type: ignore[attr-defined]
            assert (ident == threading.get_ident()) is on_loop
        finally:
            await store.aclose()


@asynccontextmanager
async def _contended(
    tmp_path: Path, busy_timeout: float
) -> AsyncIterator[tuple[SQLiteStore, sqlite3.Connection, Record]]:
    """A store on the loop with an order and a plan on it, and another connection to its file
    (the test takes that connection's lock)."""
    path = tmp_path / "s.db"
    store = SQLiteStore(path, io="loop", busy_timeout=busy_timeout)
    await store.setup()
    holder = sqlite3.connect(path, isolation_level=None)
    try:
        await store.own("order/7", "sales")
        order = await store.put("order/7", {"n": 0}, author="sales")
        yield store, holder, await create_plan(store, author="planner", parents=[order.id])
    finally:
        if holder.in_transaction:
            holder.execute("ROLLBACK")
        holder.close()
        await store.aclose()


async def test_a_write_waits_for_another_connections_lock_on_the_thread_not_the_loop(
    tmp_path: Path,
) -> None:
    async with _contended(tmp_path, busy_timeout=5.0) as (store, holder, _):
        holder.execute("BEGIN IMMEDIATE")
        rec, stalled = await _while_ticking(
            store.put("order/7", {"n": 1}, author="sales"), lambda: holder.execute("ROLLBACK")
        )
        assert stalled < 0.15  # a write sleeping on the lock on the loop would stall it 0.2 s
        assert (await store.states(["order/7"]))["order/7"].head == rec.id


async def test_an_audited_allow_waits_for_the_lock_on_the_thread_and_is_recorded(
    tmp_path: Path,
) -> None:
    async with _contended(tmp_path, busy_timeout=5.0) as (store, holder, plan):
        gate = Gate(store, POLICY, audit="durable")  # the allow's record written with its reads
        assert (await gate.check(ToolCall("ship", ARGS, plan.id))).verdict == "allow"  # memo warm
        holder.execute("BEGIN IMMEDIATE")
        verdict, stalled = await _while_ticking(
            gate.check(ToolCall("ship", ARGS, plan.id)), lambda: holder.execute("ROLLBACK")
        )
        assert stalled < 0.15
        assert (verdict.verdict, verdict.reason) == ("allow", "current")
        assert verdict.decision_id is not None
        [entry] = await store.journal(kind="gate", subject=plan.id, limit=1)
        assert entry.id == verdict.decision_id


async def test_an_allow_that_cannot_be_recorded_in_time_blocks(tmp_path: Path, audit: str) -> None:
    async with _contended(tmp_path, busy_timeout=0.05) as (store, holder, plan):
        holder.execute("BEGIN EXCLUSIVE")
        gate = Gate(store, POLICY, audit=audit)
        verdict = await check_until_recorded(gate, ToolCall("ship", ARGS, plan.id))
        assert (verdict.verdict, verdict.reason) == ("block", "audit_unavailable")
        if audit == "deferred":  # the allow it queued cannot be written, and closing says so
            with pytest.raises(AuditBacklogError, match="locked"):
                await gate.aclose()
        with pytest.raises(StoreUnavailableError, match="locked"):
            await store.put("order/7", {"n": 9}, author="sales")


def test_where_calls_run_is_checked(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="io must be"):
        create_async_store(f"sqlite:///{tmp_path / 's.db'}?io=fast")
    with pytest.raises(ConfigError, match="io must be"):
        SQLiteStore(tmp_path / "s.db", io="fast")


@pytest.mark.parametrize(
    ("url", "opened"),
    [
        ("sqlite:///team.db", "sqlite:///team.db?io=loop"),
        ("sqlite:///team.db?synchronous=full", "sqlite:///team.db?synchronous=full&io=loop"),
        ("sqlite:///team.db?io=thread", "sqlite:///team.db?io=thread"),
        ("memory://", "memory://"),
        ("postgresql://u@h/db", "postgresql://u@h/db"),
    ],
)
def test_servers_open_sqlite_on_their_loop_unless_the_url_chooses(url: str, opened: str) -> None:
    assert sqlite_on_loop(url) == opened


async def test_a_lineage_walk_runs_on_the_thread_and_a_check_seen_before_on_the_loop(
    tmp_path: Path,
) -> None:
    # A first check may walk thousands of records: never on the loop. A plan checked before
    # reads a row or two: on the loop.
    async with _contended(tmp_path, busy_timeout=5.0) as (store, _, plan):
        ran: list[bool] = []
        call = store._runner.call

        async def spy(fn: Any, *, may_run_on_loop: bool = True) -> Any:
            ran.append(may_run_on_loop)
            return await call(fn, may_run_on_loop=may_run_on_loop)

        store._runner.call = spy  # type: ignore[method-assign]
        for audit in ("deferred", "off"):
            ran.clear()
            gate = Gate(store, POLICY, audit=audit)
            memo = gate.walk.reads.memo  # the store's: a gate before this one filled it
            memo._entries.clear()
            memo._built.clear()
            assert (await gate.check(ToolCall("ship", ARGS, plan.id))).verdict == "allow"
            assert ran[0] is False  # the walk
            ran.clear()
            assert (await gate.check(ToolCall("ship", ARGS, plan.id))).verdict == "allow"
            assert ran == [True]  # one call, on the loop
            await gate.aclose()
