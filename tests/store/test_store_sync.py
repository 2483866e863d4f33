"""The synchronous twin `Store` behaves like `AsyncStore`, on every backend."""

from __future__ import annotations

import asyncio
import inspect
import threading
from pathlib import Path

import anyio
import pytest

from planfence.plugins.gate import Decision, find_decisions_sync
from planfence.shared_memory import (
    AsyncStore,
    ConfigError,
    HeadConflictError,
    NotOwnerError,
    Record,
    Store,
    StoreUnavailableError,
    UnknownRecordError,
    WriteBatch,
    create_async_store,
    open_store,
)
from planfence.shared_memory.batches import AdvanceHead
from planfence.shared_memory.bridge import StoreBridge
from planfence.shared_memory.sync import Portal, stream_twin, twin

REQ = "trip/42/requirements"


def test_sync_twin_round_trip(store: Store) -> None:
    store.own(REQ, "planner")
    r1 = store.put(REQ, {"destination": "Lisbon"}, author="planner", expected_head=None)
    r2 = store.put(REQ, {"destination": "Porto"}, author="planner", parents=[r1.id])
    with pytest.raises(HeadConflictError) as err:
        store.put(REQ, 3, author="planner", expected_head=r1.id)
    assert err.value.current == r2.id
    with pytest.raises(NotOwnerError):
        store.put(REQ, 3, author="executor")
    plan = store.add("trip/42/plan", "p", author="planner", parents=[r1.id], kind="plan")
    assert store.get(plan.id) == plan
    assert set(store.get_many([r1.id, r2.id])) == {r1.id, r2.id}
    assert store.head(REQ) == r2.id
    assert store.heads([REQ]) == {REQ: r2.id}
    assert store.states([REQ])[REQ].version == 2
    assert store.owner(REQ) == "planner"
    assert [s.key for s in store.keys("trip/")] == [REQ]
    fr = store.frontier([plan.id], [REQ])
    assert fr.used(REQ) == {r1.id}
    assert store.lineage(plan.id).visited == 2
    cand = store.add(REQ, 3, author="updater", parents=[r2.id])
    store.advance(REQ, cand.id, by="planner", expected_head=r2.id)
    store.transfer(REQ, "reviewer", by="planner")
    r4 = Record.create(REQ, 4, author="reviewer", parents=[cand.id])
    store.write(WriteBatch(records=(r4,), ops=(AdvanceHead(REQ, r4.id, cand.id, "reviewer"),)))
    assert store.head(REQ) == r4.id
    feed = list(store.iter_changes())
    assert [c.kind for c in feed] == ["owner", "head", "head", "head", "owner", "head"]
    assert store.changes(feed[-2].seq) == feed[-1:]
    store.log(Decision(source="gate", verdict="allow", tool="book"))
    assert [d.tool for d in find_decisions_sync(store, source="gate")] == ["book"]
    with pytest.raises(UnknownRecordError):
        store.get("f" * 64)
    assert store.url


async def test_sync_store_inside_a_running_loop(store: Store) -> None:
    """Sync code called from async code (a sync tool in an async agent) must not deadlock."""
    store.own(REQ, "planner")
    rec = store.put(REQ, 1, author="planner")
    assert store.head(REQ) == rec.id


def test_close_is_idempotent(store_url: str) -> None:
    s = open_store(store_url)
    s.close()
    s.close()


def _threads() -> int:
    return sum(1 for t in threading.enumerate() if t.name.startswith("planfence"))


def test_failed_open_leaks_no_thread(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("")
    before = _threads()
    with pytest.raises(StoreUnavailableError):
        open_store(f"sqlite:///{blocker / 'sub' / 'store.db'}")
    with pytest.raises(StoreUnavailableError):
        open_store("postgresql://postgres@127.0.0.1:1/test?schema=nope&connect_timeout=1")
    assert _threads() == before


def test_not_a_database_is_unavailable(tmp_path: Path) -> None:
    junk = tmp_path / "junk.db"
    junk.write_bytes(b"this is not sqlite" * 100)
    with pytest.raises(StoreUnavailableError):
        open_store(f"sqlite:///{junk}")


def test_sqlite_url_options(tmp_path: Path) -> None:
    import sqlite3

    from planfence.shared_memory import ConfigError, open_store

    with open_store(f"sqlite:///{tmp_path / 'a.db'}?synchronous=full") as store:
        store.own("k/1", "o")
        assert store.aio.synchronous == "FULL"  # type: ignore[attr-defined]
    with sqlite3.connect(tmp_path / "a.db") as raw:
        assert raw.execute("SELECT count(*) FROM keys").fetchone() == (1,)
    raw.close()
    with pytest.raises(ConfigError, match="synchronous must be"):
        open_store(f"sqlite:///{tmp_path / 'b.db'}?synchronous=sometimes")
    with pytest.raises(ConfigError, match="unknown SQLite store option"):
        open_store(f"sqlite:///{tmp_path / 'c.db'}?journal=off")


def _public_coroutine_methods() -> list[str]:
    lifecycle = {"setup", "aclose"}  # a sync Store runs these itself, when opened and closed
    return sorted(
        name
        for name, fn in inspect.getmembers(AsyncStore)
        if not name.startswith("_")
        and name not in lifecycle
        and (inspect.iscoroutinefunction(fn) or inspect.isasyncgenfunction(fn))
    )


@pytest.mark.parametrize("name", _public_coroutine_methods())
def test_every_async_method_has_a_sync_twin(name: str) -> None:
    made = Store.__dict__.get(name)
    assert isinstance(made, twin | stream_twin), f"Store.{name} is not generated from AsyncStore"
    assert made.name == name
    stream = inspect.isasyncgenfunction(getattr(AsyncStore, name))
    assert isinstance(made, stream_twin) == stream


def test_twins_run_the_backend_method_and_keep_its_signature(store: Store) -> None:
    store.own(REQ, "planner")
    first = store.put(REQ, 1, author="planner")
    assert inspect.signature(store.put) == inspect.signature(store.aio.put)
    assert store.put.__doc__ == store.aio.put.__doc__
    assert store.last_seq() == 2
    feed = list(store.subscribe(0, idle_timeout=0.05))
    assert [(c.kind, c.key) for c in feed] == [("owner", REQ), ("head", REQ)]
    assert feed[-1].head == first.id
    assert list(store.subscribe(feed[-1].seq, idle_timeout=0.01)) == []


def test_portal_calls_from_async_code_and_refuses_its_own_thread() -> None:
    portal = Portal("planfence-test-portal")
    try:

        async def where() -> int:
            return threading.get_ident()

        async def nested() -> None:
            portal.call(where)

        assert portal.call(where) != threading.get_ident()
        assert anyio.run(portal.acall, where) != threading.get_ident()
        with pytest.raises(RuntimeError, match="own portal thread"):
            portal.call(nested)
    finally:
        portal.close()


async def test_bridge_reaches_every_kind_of_store(store: Store, store_url: str) -> None:
    async def head(aio: AsyncStore, key: str) -> str | None:
        return await aio.head(key)

    store.own(REQ, "planner")
    rec = store.put(REQ, 1, author="planner")
    bridge = StoreBridge(store)
    assert bridge.aio is store.aio
    assert await bridge.acall(head, REQ) == rec.id
    assert await asyncio.to_thread(bridge.call, head, REQ) == rec.id
    if not store_url.startswith("memory"):  # a URL opens its own store of the same data
        by_url = StoreBridge(store_url)
        assert await by_url.acall(head, REQ) == rec.id
        await by_url.aclose()
        assert by_url.store is None


def test_bridge_drives_an_async_store_from_sync_code() -> None:
    async def make() -> AsyncStore:
        aio = create_async_store("memory://")
        await aio.setup()
        return aio

    aio = Portal.shared().call(make)
    bridge = StoreBridge(aio)

    async def own(s: AsyncStore) -> None:
        await s.own(REQ, "planner")

    async def owner(s: AsyncStore) -> str | None:
        return await s.owner(REQ)

    bridge.call(own)
    assert bridge.call(owner) == "planner"
    with pytest.raises(ConfigError):
        StoreBridge(42)  # type: ignore[arg-type]
