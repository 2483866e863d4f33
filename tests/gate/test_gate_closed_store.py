"""Close order: a store closed before its gate writes the allows the gate queued (the store drains
the deferred audits registered with it), the gate then closes with nothing left to say, and a
gate used after its store closed blocks as `store_unavailable`. Each case runs as a script, so
what a user would see on stderr is part of what is checked."""

from __future__ import annotations

import gc
import logging
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from planfence.plugins.gate import Gate, Policy, ToolCall, create_plan, find_decisions
from planfence.shared_memory import AsyncStore, create_async_store

POLICY = Policy.from_toml('[tools.ship]\ndepends_on = ["order/{id}"]\n')
ARGS = {"id": "7"}

PRELUDE = textwrap.dedent(
    """
    import asyncio, sys
    from planfence.plugins.gate import Gate, Policy, SyncGate, ToolCall
    from planfence.plugins.gate import create_plan
    from planfence.plugins.gate.plans import create_plan_sync
    from planfence.shared_memory import open_async_store, open_store

    POLICY = Policy.from_toml('[tools.ship]\\ndepends_on = ["order/{id}"]\\n')
    URL = sys.argv[1]
    """
)

ASYNC_STORE_FIRST = """
async def main():
    store = await open_async_store(URL)
    await store.own("order/7", "sales")
    order = await store.put("order/7", {"n": 0}, author="sales")
    plan = await create_plan(store, author="planner", parents=[order.id])
    gate = Gate(store, POLICY)
    print((await gate.check(ToolCall("ship", {"id": "7"}, plan.id))).verdict)
    await store.aclose()                      # before the gate
    after = await gate.check(ToolCall("ship", {"id": "7"}, plan.id))
    print(after.verdict, after.reason)
    await gate.aclose()

asyncio.run(main())
"""

ASYNC_GATE_NEVER_CLOSED = """
async def main():
    store = await open_async_store(URL)
    await store.own("order/7", "sales")
    order = await store.put("order/7", {"n": 0}, author="sales")
    plan = await create_plan(store, author="planner", parents=[order.id])
    gate = Gate(store, POLICY)
    print((await gate.check(ToolCall("ship", {"id": "7"}, plan.id))).verdict)
    await store.aclose()                      # the gate is never closed

asyncio.run(main())
"""

SYNC_STORE_FIRST = """
store = open_store(URL)
store.own("order/7", "sales")
order = store.put("order/7", {"n": 0}, author="sales")
plan = create_plan_sync(store, author="planner", parents=[order.id])
gate = SyncGate(store, POLICY)
print(gate.check(ToolCall("ship", {"id": "7"}, plan.id)).verdict)
store.close()                                 # before the gate
gate.close()
"""

SCRIPTS = {
    "async, store closed before the gate": ASYNC_STORE_FIRST,
    "async, gate never closed": ASYNC_GATE_NEVER_CLOSED,
    "sync, store closed before the gate": SYNC_STORE_FIRST,
}


def _run(script: str, url: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-W", "default", "-c", PRELUDE + script, url],
        capture_output=True,
        text=True,
        timeout=120,
    )


def _verdicts(url: str) -> list[str]:
    async def read() -> list[str]:
        async with create_async_store(url, create=False) as store:
            return sorted(d.verdict for d in await find_decisions(store))

    import asyncio

    return asyncio.run(read())


@pytest.fixture(autouse=True)
def _earlier_garbage_collected() -> None:
    """A gate that an earlier test in this process left unclosed says so when it is garbage
    collected, which could be in the middle of a test here that checks every line logged."""
    gc.collect()


@pytest.mark.parametrize("case", sorted(SCRIPTS))
def test_closing_the_store_first_loses_no_allow_and_says_nothing(
    case: str, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    for url in (f"sqlite:///{tmp_path / 'store.db'}", request.getfixturevalue("pg_url")):
        done = _run(SCRIPTS[case], url)
        assert done.returncode == 0, done.stderr
        assert done.stdout.splitlines()[0] == "allow"
        if "after" in SCRIPTS[case]:
            assert done.stdout.splitlines()[1] == "block store_unavailable"
        assert done.stderr == ""  # no "gate was not closed", no backlog, nothing unawaited
        assert _verdicts(url) == ["allow"]


async def _seeded(store: AsyncStore) -> str:
    await store.own("order/7", "sales")
    order = await store.put("order/7", {"n": 0}, author="sales")
    return (await create_plan(store, author="planner", parents=[order.id])).id


async def test_a_gate_closed_after_its_store_has_nothing_left_to_write(
    store_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    store = create_async_store(store_url)
    await store.setup()
    plan = await _seeded(store)
    gate = Gate(store, POLICY)
    for _ in range(3):
        assert (await gate.check(ToolCall("ship", ARGS, plan))).allowed
    assert gate.deferred is not None and gate.deferred.pending > 0
    with caplog.at_level(logging.WARNING):
        await store.aclose()
        assert gate.deferred.pending == 0 and gate.deferred.written == 3
        await gate.aclose()  # nothing left: no AuditBacklogError
        del gate
    assert caplog.records == []


async def test_allows_the_store_cannot_write_at_close_are_said_in_one_line(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    store = create_async_store(f"sqlite:///{tmp_path / 's.db'}")
    await store.setup()
    plan = await _seeded(store)
    gate = Gate(store, POLICY)
    assert (await gate.check(ToolCall("ship", ARGS, plan))).allowed
    assert gate.deferred is not None

    async def broken(batch: object) -> object:
        raise OSError("disk gone")

    store._write = broken  # type: ignore[method-assign,assignment]
    with caplog.at_level(logging.ERROR):
        await store.aclose()
        await gate.aclose()  # reported already: nothing more to say
        del gate
    lines = [r.getMessage() for r in caplog.records]
    assert len(lines) == 1, lines
    assert lines[0].startswith("1 allow records were not written to the audit journal before")
    assert "disk gone" in lines[0]
