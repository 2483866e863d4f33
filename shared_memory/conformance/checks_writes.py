"""Owners, heads and write batches: who may write, compare-and-set, all-or-nothing batches."""

from __future__ import annotations

from typing import Any

from ..batches import AdvanceHead, AssignOwner, TransferOwner, WriteBatch
from ..errors import (
    AlreadyOwnedError,
    HeadConflictError,
    InvalidKeyError,
    InvalidValueError,
    NotOwnerError,
    UnknownKeyError,
    UnknownRecordError,
)
from ..journal import Entry
from ..records import Record
from ..store import AsyncStore
from .runner import Check, Context, raises

REQ = "trip/42/requirements"
PLAN = "trip/42/plan"
QUOTE = "trip/42/quote"
MISSING = "0" * 64


async def nothing_written(store: AsyncStore, ids: list[str], seq: int) -> None:
    assert await store.get_many(ids) == {}
    assert await store.changes(seq) == []
    assert await store.journal() == []


async def owner_is_assigned_once(store: AsyncStore, ctx: Context) -> None:
    assert await store.owner(REQ) is None
    change = await store.own(REQ, "planner")
    assert (change.kind, change.key, change.owner, change.by, change.head) == (
        "owner",
        REQ,
        "planner",
        "planner",
        None,
    )
    assert await store.owner(REQ) == "planner"
    with raises(AlreadyOwnedError) as err:
        await store.own(REQ, "executor")
    assert err.value.owner == "planner"
    assert await store.owner(REQ) == "planner"
    with raises(UnknownKeyError):
        await store.head("nobody/owns/this")
    assert await store.head(REQ) is None
    change = await store.own("a/b", "planner", by="admin")
    assert (change.owner, change.by) == ("planner", "admin")


async def transfer_only_by_the_owner_and_recorded(store: AsyncStore, ctx: Context) -> None:
    await store.own(REQ, "planner")
    r1 = await store.put(REQ, 1, author="planner")
    with raises(NotOwnerError) as err:
        await store.transfer(REQ, "mallory", by="mallory")
    assert (err.value.agent, err.value.owner) == ("mallory", "planner")
    change = await store.transfer(REQ, "reviewer", by="planner")
    assert (change.kind, change.owner, change.by, change.head) == (
        "owner",
        "reviewer",
        "planner",
        r1.id,
    )
    assert await store.owner(REQ) == "reviewer"
    assert await store.head(REQ) == r1.id  # a transfer keeps the head
    with raises(NotOwnerError):
        await store.put(REQ, 2, author="planner")
    with raises(NotOwnerError):
        await store.transfer(REQ, "planner", by="planner")
    r2 = await store.put(REQ, 2, author="reviewer", expected_head=r1.id)
    feed = await store.changes()
    assert [(c.kind, c.owner, c.by) for c in feed] == [
        ("owner", "planner", "planner"),
        ("head", "planner", "planner"),
        ("owner", "reviewer", "planner"),
        ("head", "reviewer", "reviewer"),
    ]
    assert feed[-1].head == r2.id
    with raises(UnknownKeyError):
        await store.transfer("no/such/key", "x", by="y")


async def compare_and_set_heads(store: AsyncStore, ctx: Context) -> None:
    await store.own(REQ, "planner")
    r1 = await store.put(REQ, 1, author="planner", expected_head=None)
    assert await store.head(REQ) == r1.id
    with raises(HeadConflictError) as err:
        await store.put(REQ, 2, author="planner", expected_head=None)
    assert (err.value.key, err.value.expected, err.value.current) == (REQ, None, r1.id)
    r2 = await store.put(REQ, 2, author="planner", expected_head=r1.id, parents=[r1.id])
    with raises(HeadConflictError) as err:
        await store.put(REQ, 3, author="planner", expected_head=r1.id)
    assert err.value.current == r2.id
    r3 = await store.put(REQ, 3, author="planner")  # CURRENT: the head read just before
    assert await store.head(REQ) == r3.id
    states = await store.states([REQ, "unowned/key"])
    assert list(states) == [REQ]
    assert (states[REQ].owner, states[REQ].head, states[REQ].version) == ("planner", r3.id, 3)
    assert await store.heads([REQ]) == {REQ: r3.id}


async def only_the_owner_advances(store: AsyncStore, ctx: Context) -> None:
    await store.own(REQ, "planner")
    r1 = await store.put(REQ, 1, author="planner")
    seq = await store.last_seq()
    for expected in (r1.id, None):
        with raises(NotOwnerError):
            await store.put(REQ, 2, author="executor", expected_head=expected)
    with raises(NotOwnerError):
        await store.put(REQ, 2, author="executor")
    with raises(UnknownKeyError):
        await store.put("unowned/key", 2, author="executor")
    assert await store.head(REQ) == r1.id
    assert await store.changes(seq) == []
    # a record the executor stored without a head cannot be made head by the executor either
    cand = await store.add(REQ, 2, author="executor", parents=[r1.id])
    with raises(NotOwnerError):
        await store.advance(REQ, cand.id, by="executor", expected_head=r1.id)
    await store.advance(REQ, cand.id, by="planner", expected_head=r1.id)
    assert await store.head(REQ) == cand.id


async def failed_cas_writes_nothing(store: AsyncStore, ctx: Context) -> None:
    await store.own(REQ, "planner")
    r1 = await store.put(REQ, 1, author="planner")
    seq = await store.last_seq()
    rec = Record.create(REQ, 2, author="planner", parents=[r1.id])
    entry = Entry("test", subject=rec.id, labels={"step": "moved"})
    for expected, by, error in (
        (None, "planner", HeadConflictError),
        (MISSING, "planner", HeadConflictError),
        (r1.id, "executor", NotOwnerError),
    ):
        batch = WriteBatch(
            records=(rec,), ops=(AdvanceHead(REQ, rec.id, expected, by),), entries=(entry,)
        )
        with raises(error):
            await store.write(batch)
        await nothing_written(store, [rec.id], seq)
    with raises(HeadConflictError):
        await store.advance(REQ, r1.id, by="planner", expected_head=None, entries=[entry])
    await nothing_written(store, [rec.id], seq)
    assert await store.head(REQ) == r1.id


async def multi_key_batch_is_all_or_nothing(store: AsyncStore, ctx: Context) -> None:
    await store.own("a/x", "planner")
    await store.own("a/y", "planner")
    x1 = await store.put("a/x", 1, author="planner")
    y1 = await store.put("a/y", 1, author="planner")
    seq = await store.last_seq()
    x2 = Record.create("a/x", 2, author="planner")
    y2 = Record.create("a/y", 2, author="planner")
    batch = WriteBatch(
        records=(x2, y2),
        ops=(
            AdvanceHead("a/x", x2.id, x1.id, "planner"),
            AdvanceHead("a/y", y2.id, None, "planner"),  # stale
            AssignOwner("a/z", "planner", "planner"),
        ),
    )
    with raises(HeadConflictError):
        await store.write(batch)
    await nothing_written(store, [x2.id, y2.id], seq)
    assert await store.heads(["a/x", "a/y"]) == {"a/x": x1.id, "a/y": y1.id}
    assert await store.owner("a/z") is None
    good = WriteBatch(
        records=(x2, y2),
        ops=(
            AdvanceHead("a/x", x2.id, x1.id, "planner"),
            AdvanceHead("a/y", y2.id, y1.id, "planner"),
            AssignOwner("a/z", "planner", "planner"),
            TransferOwner("a/z", "reviewer", "planner"),
        ),
    )
    changes = await store.write(good)
    assert [c.seq for c in changes] == sorted(c.seq for c in changes)
    assert changes[0].seq > seq
    assert await store.heads(["a/x", "a/y"]) == {"a/x": x2.id, "a/y": y2.id}
    assert await store.owner("a/z") == "reviewer"


async def advance_checks_the_record(store: AsyncStore, ctx: Context) -> None:
    await store.own(REQ, "planner")
    await store.own(QUOTE, "planner")
    q = await store.put(QUOTE, 1, author="planner")
    with raises(InvalidValueError):  # a version of another key
        await store.advance(REQ, q.id, by="planner", expected_head=None)
    with raises(UnknownRecordError):
        await store.advance(REQ, MISSING, by="planner", expected_head=None)
    assert await store.head(REQ) is None


async def put_with_unknown_parent_writes_nothing(store: AsyncStore, ctx: Context) -> None:
    await store.own(REQ, "planner")
    seq = await store.last_seq()
    with raises(UnknownRecordError) as err:
        await store.put(REQ, 1, author="planner", parents=[MISSING])
    assert err.value.ids == (MISSING,)
    assert await store.head(REQ) is None
    assert await store.changes(seq) == []


async def add_derived_records(store: AsyncStore, ctx: Context) -> None:
    await store.own(REQ, "planner")
    r1 = await store.put(REQ, 1, author="planner")
    seq = await store.last_seq()
    p1 = await store.add(PLAN, {"steps": ["book"]}, author="planner", parents=[r1.id], kind="plan")
    p2 = await store.add(
        PLAN, {"steps": ["rebook"]}, author="planner", parents=[r1.id], supersedes=p1.id
    )
    assert (await store.get(p2.id)).supersedes == p1.id
    assert await store.changes(seq) == []  # no head moved
    assert await store.owner(PLAN) is None  # derived records need no owner


async def add_with_unknown_reference_writes_nothing(store: AsyncStore, ctx: Context) -> None:
    await store.own(REQ, "planner")
    r1 = await store.put(REQ, 1, author="planner")
    seq = await store.last_seq()
    entry = Entry("plan", labels={"step": "added"})
    cases: list[dict[str, Any]] = [{"parents": [r1.id, MISSING]}, {"supersedes": MISSING}]
    for kwargs in cases:
        with raises(UnknownRecordError) as err:
            await store.add(PLAN, "p", author="planner", entries=[entry], **kwargs)
        assert err.value.ids == (MISSING,)
        assert await store.changes(seq) == []
        assert await store.journal() == []
        assert [s.key for s in await store.keys()] == [REQ]
    rec = Record.create(PLAN, "p", author="planner", parents=[MISSING])
    with raises(UnknownRecordError):
        await store.write(WriteBatch(records=(rec,)))
    assert await store.get_many([rec.id]) == {}
    # parents inside the same batch are fine
    base = Record.create(REQ, 1, author="planner")
    child = Record.create(PLAN, "p", author="planner", parents=[base.id])
    await store.write(WriteBatch(records=(child, base)))
    assert set(await store.get_many([base.id, child.id])) == {base.id, child.id}


BAD_KEYS: list[object] = [
    "",
    "/a",
    "a/",
    "a//b",
    "a b",
    "a\nb",
    "ключ",
    "a/../b/ c",
    "-x",
    "k" * 257,
    None,
    42,
    "order/7\n",
]
BAD_AGENTS: list[object] = ["", "has space", "a/b", "x" * 129, None, "mallory\n"]


async def key_and_agent_syntax(store: AsyncStore, ctx: Context) -> None:
    for key in BAD_KEYS:
        with raises(InvalidKeyError):
            await store.own(key, "planner")  # type: ignore[arg-type]
        with raises(InvalidKeyError):
            await store.add(key, 1, author="planner")  # type: ignore[arg-type]
        with raises(InvalidKeyError):
            await store.head(key)  # type: ignore[arg-type]
    for agent in BAD_AGENTS:
        with raises(InvalidKeyError):
            await store.own(REQ, agent)  # type: ignore[arg-type]
        with raises(InvalidKeyError):
            await store.add(REQ, 1, author=agent)  # type: ignore[arg-type]
    assert await store.keys() == []
    for key in ("a", "trip/42/requirements", "order/A-1_b.c:d@e+f=g", "k" * 256):
        await store.own(key, "o")
    assert len(await store.keys()) == 4


async def keys_by_prefix(store: AsyncStore, ctx: Context) -> None:
    for key in ("trip/1/a", "trip/1/b", "trip/2/a", "order/9"):
        await store.own(key, "o")
    assert [s.key for s in await store.keys()] == ["order/9", "trip/1/a", "trip/1/b", "trip/2/a"]
    assert [s.key for s in await store.keys("trip/1/")] == ["trip/1/a", "trip/1/b"]
    assert await store.keys("zzz") == []
    assert [s.key for s in await store.keys("trip/%")] == []  # no LIKE wildcards


WRITE_CHECKS: tuple[Check, ...] = (
    owner_is_assigned_once,
    transfer_only_by_the_owner_and_recorded,
    compare_and_set_heads,
    only_the_owner_advances,
    failed_cas_writes_nothing,
    multi_key_batch_is_all_or_nothing,
    advance_checks_the_record,
    put_with_unknown_parent_writes_nothing,
    add_derived_records,
    add_with_unknown_reference_writes_nothing,
    key_and_agent_syntax,
    keys_by_prefix,
)
