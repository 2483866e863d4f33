"""A closed store stays closed: every use raises `StoreClosedError`, on every backend, async and
sync, and nothing reconnects, reopens or migrates again behind the user's back."""

from __future__ import annotations

import threading
from collections.abc import Awaitable, Callable
from typing import Any

import pytest

from planfence.shared_memory import (
    AsyncStore,
    Entry,
    JournalQuery,
    StoreClosedError,
    create_async_store,
    open_store,
)
from planfence.shared_memory.reads import GetKeys, QueryJournal

KEY = "order/7"
RID = "a" * 64

# Every way into an async store, one line each (a use that must raise once it is closed).
ASYNC_USES: dict[str, Callable[[AsyncStore], Awaitable[Any]]] = {
    "own": lambda s: s.own("order/8", "sales"),
    "put": lambda s: s.put(KEY, {"n": 1}, author="sales"),
    "put_expected": lambda s: s.put(KEY, {"n": 1}, author="sales", expected_head=None),
    "add": lambda s: s.add("plan/1", "p", author="planner"),
    "transfer": lambda s: s.transfer(KEY, "ops", by="sales"),
    "reassign": lambda s: s.reassign(KEY, "ops", by="admin"),
    "get": lambda s: s.get(RID),
    "get_many": lambda s: s.get_many([RID]),
    "resolve_id": lambda s: s.resolve_id(RID[:8]),
    "head": lambda s: s.head(KEY),
    "heads": lambda s: s.heads([KEY]),
    "owner": lambda s: s.owner(KEY),
    "keys": lambda s: s.keys(),
    "frontier": lambda s: s.frontier([RID], [KEY]),
    "changes": lambda s: s.changes(),
    "last_seq": lambda s: s.last_seq(),
    "log": lambda s: s.log(Entry("note", subject="x")),
    "journal": lambda s: s.journal(),
    "read": lambda s: s.read([GetKeys((KEY,)), QueryJournal(JournalQuery.where())]),
    "lease": lambda s: s.lease({KEY: None}, holder="gate", ttl_ms=1000),
    "setup": lambda s: s.setup(),
    "subscribe": lambda s: anext(aiter(s.subscribe(idle_timeout=0.01))),
}


@pytest.mark.parametrize("use", sorted(ASYNC_USES))
async def test_every_use_of_a_closed_store_raises_store_closed(store_url: str, use: str) -> None:
    store = create_async_store(store_url)
    await store.setup()
    await store.own(KEY, "sales")
    await store.aclose()
    assert store.closed
    with pytest.raises(StoreClosedError, match="is closed"):
        await ASYNC_USES[use](store)
    await store.aclose()  # closing again does nothing


async def test_a_closed_postgres_store_never_connects_again(
    pg_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    import psycopg

    store = create_async_store(pg_url)
    await store.setup()
    await store.own(KEY, "sales")
    await store.aclose()
    connects: list[str] = []
    real = psycopg.AsyncConnection.connect

    async def counted(*args: Any, **kwargs: Any) -> Any:
        connects.append("connect")
        return await real(*args, **kwargs)

    monkeypatch.setattr(psycopg.AsyncConnection, "connect", counted)
    for use in ("heads", "journal", "log", "setup"):
        with pytest.raises(StoreClosedError):
            await ASYNC_USES[use](store)
    assert connects == []  # no reconnect, no second migration


def test_every_use_of_a_closed_sync_store_raises_store_closed(store_url: str) -> None:
    store = open_store(store_url)
    store.own(KEY, "sales")
    store.close()
    assert store.closed
    uses: list[Callable[[], Any]] = [
        lambda: store.get(RID),
        lambda: store.heads([KEY]),
        lambda: store.put(KEY, 1, author="sales"),
        lambda: store.journal(),
        lambda: list(store.subscribe(idle_timeout=0.01)),
        lambda: list(store.iter_changes()),
    ]
    for use in uses:
        with pytest.raises(StoreClosedError, match="is closed"):
            use()
    store.close()


def test_a_closed_sync_store_raises_store_closed_in_any_thread() -> None:
    # A thread that starts after the store's portal thread ended may get its id: it is not the
    # portal thread, and must be told the store is closed like any other thread.
    store = open_store("memory://")
    portal_id = store.portal._thread.ident
    store.close()
    outcomes: list[tuple[bool, str]] = []

    def use() -> None:
        try:
            store.get("k")
        except Exception as exc:
            outcomes.append((threading.get_ident() == portal_id, type(exc).__name__))

    for _ in range(20):  # new threads until one reuses the id (usually the first few)
        thread = threading.Thread(target=use)
        thread.start()
        thread.join()
        if outcomes[-1][0]:
            break
    assert {name for _, name in outcomes} == {"StoreClosedError"}, outcomes


def test_a_sync_store_closed_through_its_async_store_is_closed(store_url: str) -> None:
    store = open_store(store_url)
    store.portal.call(store.aio.aclose)
    with pytest.raises(StoreClosedError):
        store.heads([KEY])
    store.close()


def test_awaiting_on_a_closed_sync_store_leaves_no_coroutine_unawaited() -> None:
    store = open_store("memory://")
    store.close()
    made = store.aio.heads([KEY])
    with pytest.raises(StoreClosedError):
        store._run(made)
    # `filterwarnings = error`: a coroutine left unawaited would fail the test when collected.
    assert made.cr_frame is None  # closed, not pending


class _Queue:
    """A writer that queued something for the store (what a gate's deferred audit does)."""

    def __init__(self, store: AsyncStore, fail: bool = False) -> None:
        self.store = store
        self.fail = fail
        self.drained = 0
        store.drain_on_close(self)

    async def drain(self) -> None:
        if self.fail:
            raise RuntimeError("cannot write")
        await self.store.log(Entry("queued", subject="drained"))
        self.drained += 1


async def test_closing_a_store_drains_its_writers_first(store_url: str) -> None:
    store = create_async_store(store_url)
    await store.setup()
    queue = _Queue(store)
    await store.aclose()
    assert queue.drained == 1
    if not store_url.startswith("memory://"):
        async with create_async_store(store_url) as again:
            assert [e.subject for e in await again.journal(kind="queued")] == ["drained"]
    await store.aclose()
    assert queue.drained == 1  # once


async def test_a_writer_that_fails_to_drain_does_not_keep_the_store_open() -> None:
    store = create_async_store("memory://")
    await store.setup()
    _queue = _Queue(store, fail=True)
    with pytest.raises(RuntimeError, match="cannot write"):
        await store.aclose()
    assert store.closed
    with pytest.raises(StoreClosedError):
        await store.heads([KEY])


async def test_writers_are_held_weakly() -> None:
    import gc

    store = create_async_store("memory://")
    await store.setup()
    _Queue(store)  # dropped at once
    gc.collect()
    await store.aclose()  # nothing to drain, nothing kept alive
    assert not list(store._drains)


def test_a_store_opened_sync_drains_on_close() -> None:
    store = open_store("memory://")
    queue = _Queue(store.aio)
    store.close()
    assert queue.drained == 1
