"""The change feed, subscriptions, a replica following them, the audit journal, and
`transact` (reads, then the write they decide)."""

from __future__ import annotations

import asyncio

from ..batches import AdvanceHead, WriteBatch
from ..errors import HeadConflictError
from ..journal import Entry
from ..model import Change
from ..reads import GetKeys, ReadFlow
from ..replica import Replica
from ..store import AsyncStore
from .runner import Check, Context, raises

REQ = "trip/42/requirements"
QUOTE = "trip/42/quote"


async def change_feed_order(store: AsyncStore, ctx: Context) -> None:
    await store.own(REQ, "planner")
    heads: list[str | None] = [None]
    for i in range(5):
        heads.append((await store.put(REQ, i, author="planner")).id)
    await store.own(QUOTE, "quoter")
    feed = await store.changes()
    seqs = [c.seq for c in feed]
    assert seqs == sorted(seqs)
    assert len(set(seqs)) == len(seqs) == 7
    head_changes = [c for c in feed if c.kind == "head"]
    assert [c.head for c in head_changes] == heads[1:]
    assert [c.previous for c in head_changes] == heads[:-1]
    assert await store.last_seq() == seqs[-1]
    assert await store.changes(seqs[2], limit=2) == feed[3:5]
    assert await store.changes(seqs[-1]) == []
    assert all(c.at for c in feed)
    assert feed[0].to_dict()["kind"] == "owner"


async def subscribe_yields_everything_then_idles_out(store: AsyncStore, ctx: Context) -> None:
    await store.own(REQ, "planner")
    first = await store.put(REQ, 0, author="planner")

    async def writer() -> list[str]:
        ids = []
        for i in range(1, 6):
            await asyncio.sleep(0.01)
            ids.append((await store.put(REQ, i, author="planner")).id)
        return ids

    task = asyncio.create_task(writer())
    seen = [c async for c in store.subscribe(0, idle_timeout=1.0)]
    written = await task
    assert [c.head for c in seen if c.kind == "head"] == [first.id, *written]
    assert [c.seq for c in seen] == sorted({c.seq for c in seen})

    async def idle(since: int, timeout: float) -> list[object]:
        return [c async for c in store.subscribe(since, idle_timeout=timeout)]

    for since, timeout in ((seen[-1].seq, 0.2), (10**9, 0.05)):
        assert await asyncio.wait_for(idle(since, timeout), 30) == []  # a hang guard only


async def replica_stays_fresh(store: AsyncStore, ctx: Context) -> None:
    await store.own("trip/1/req", "planner")
    await store.own("other/x", "planner")
    old = await store.put("trip/1/req", {"v": 0}, author="planner")
    replica = Replica(store, prefix="trip/")
    seen: list[Change] = []
    replica.on_change(seen.append)
    transferred = asyncio.Event()
    replica.on_change(lambda c: transferred.set() if c.owner == "reviewer" else None)
    applied = await replica.sync()
    assert replica.head("trip/1/req") == old.id
    assert replica.current("trip/1/req") == old
    assert [c.key for c in applied] == ["trip/1/req", "trip/1/req"]
    replica.start()
    try:
        for i in range(1, 6):
            rec = await store.put("trip/1/req", {"v": i}, author="planner")
            await store.put("other/x", i, author="planner")
        await store.transfer("trip/1/req", "reviewer", by="planner")
        await asyncio.wait_for(transferred.wait(), 20)
    finally:
        await replica.stop()
    assert replica.head("trip/1/req") == rec.id == await store.head("trip/1/req")
    current = replica.current("trip/1/req")
    assert current is not None
    assert current.value == {"v": 5}
    assert replica.head("other/x") is None  # outside the prefix
    assert replica.states["trip/1/req"].version == 6
    assert all(c.key.startswith("trip/") for c in seen)
    assert replica.seq == await store.last_seq()


async def journal_filters(store: AsyncStore, ctx: Context) -> None:
    entries = [
        Entry("review", subject="doc/1", labels={"topic": "cats", "by": "ann", "mark": "ok"}),
        Entry("review", subject="doc/2", labels={"topic": "cats", "note": "late", "mark": "no"}),
        Entry("review", subject="doc/2", labels={"topic": "dogs", "by": "ann", "mark": "redo"}),
        Entry("tally", labels={"mark": "kept"}, detail={"acc": [0.5, 0.75], "n": None}),
    ]
    ids = [await store.log(e) for e in entries]
    assert ids == sorted(ids) and len(set(ids)) == 4
    everything = await store.journal()
    assert [e.labels["mark"] for e in everything] == ["kept", "redo", "no", "ok"]  # newest first
    assert [e.id for e in everything] == ids[::-1]
    assert all(e.at for e in everything)
    assert everything[0].detail == {"acc": [0.5, 0.75], "n": None}
    assert everything[-1].labels == {"by": "ann", "mark": "ok", "topic": "cats"}
    assert everything[-1].to_dict()["subject"] == "doc/1"
    assert everything[-1].to_dict()["labels"] == {"by": "ann", "mark": "ok", "topic": "cats"}

    async def marks(**query: object) -> list[str]:
        return [e.labels["mark"] for e in await store.journal(**query)]  # type: ignore[arg-type]

    assert await marks(kind="review", labels={"topic": "cats"}) == ["no", "ok"]
    assert await marks(subject="doc/2") == ["redo", "no"]
    assert await marks(labels={"by": "ann"}) == ["redo", "ok"]
    assert await marks(labels={"note": ("late", "other")}) == ["no"]
    assert await marks(labels={"topic": "cats", "by": "ann"}) == ["ok"]
    assert await marks(labels={"mark": "no"}) == ["no"]
    assert await marks(labels={"mark": ("kept", "ok"), "topic": None}) == ["kept", "ok"]
    assert await marks(labels={"mark": ()}) == ["kept", "redo", "no", "ok"]  # no values: no filter
    assert await marks(kind="review", subject="doc/2", labels={"by": "ann"}) == ["redo"]
    assert await marks(limit=2) == ["kept", "redo"]
    assert await marks(before_id=ids[2]) == ["no", "ok"]
    assert await marks(kind="nobody") == []
    assert await marks(labels={"mark": "nothing"}) == []


async def journal_entries_ride_with_a_write(store: AsyncStore, ctx: Context) -> None:
    await store.own(REQ, "planner")
    r1 = await store.put(REQ, 1, author="planner")
    proposed = Entry("change", labels={"step": "proposed"})
    cand = await store.add(REQ, 2, author="updater", parents=[r1.id], entries=[proposed])
    moved = Entry("change", subject=cand.id, labels={"step": "moved"})
    await store.advance(REQ, cand.id, by="planner", expected_head=r1.id, entries=[moved])
    found = await store.journal(kind="change")
    steps = [(e.subject, e.labels["step"]) for e in found]
    assert steps == [(cand.id, "moved"), (None, "proposed")]


async def journal_strings_are_bounded(store: AsyncStore, ctx: Context) -> None:
    n = store.limits.max_audit_field_bytes
    huge = "x" * (n * 3)
    await store.log(Entry("k", subject=huge, labels={"tag": huge}, detail={"m": huge}))
    [e] = await store.journal()
    assert e.subject is not None and len(e.subject.encode()) < n + 64
    assert "[truncated" in e.labels["tag"] and "[truncated" in str(e.detail["m"])


async def transact_reads_then_writes_what_was_decided(store: AsyncStore, ctx: Context) -> None:
    """`transact`: the flow's answer reaches `decide`, and the batch it returns is written
    (journal ids back, in order); None writes nothing; a refused batch writes none of it. Both
    with a long flow and with `short=True` (one transaction where the backend can)."""
    await store.own(REQ, "planner")
    rec = await store.put(REQ, 1, author="planner")

    def heads_flow() -> ReadFlow[str | None]:
        [states] = yield [GetKeys((REQ,))]
        return states[REQ].head if REQ in states else None

    for short in (False, True):
        seen: list[str | None] = []

        def decide(head: str | None, seen: list[str | None] = seen) -> WriteBatch:
            seen.append(head)
            one, two = Entry("t", subject=head), Entry("t", subject=head, labels={"n": "2"})
            return WriteBatch(entries=(one, two))

        head, written = await store.transact(heads_flow(), decide, short=short)
        assert head == rec.id and seen == [rec.id]
        assert written is not None and len(written.entry_ids) == 2
        assert written.entry_ids == sorted(written.entry_ids)
        found = await store.journal(kind="t", subject=rec.id, limit=2)
        assert [e.id for e in found] == written.entry_ids[::-1]
        assert await store.transact(heads_flow(), lambda head: None, short=short) == (head, None)
        before = await store.journal(limit=1000)
        stale = WriteBatch(
            ops=(AdvanceHead(REQ, rec.id, expected="f" * 64, by="planner"),),
            entries=(Entry("t", labels={"n": "refused"}),),
        )

        def refused(head: str | None, batch: WriteBatch = stale) -> WriteBatch:
            return batch

        with raises(HeadConflictError):
            await store.transact(heads_flow(), refused, short=short)
        assert await store.journal(limit=1000) == before


JOURNAL_CHECKS: tuple[Check, ...] = (
    change_feed_order,
    subscribe_yields_everything_then_idles_out,
    replica_stays_fresh,
    journal_filters,
    journal_entries_ride_with_a_write,
    journal_strings_are_bounded,
    transact_reads_then_writes_what_was_decided,
)
