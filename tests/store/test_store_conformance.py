"""The store contract, written once and run against every backend (memory, SQLite, PostgreSQL).

Each test takes the `astore` fixture (tests/conftest.py), parametrized over the backends.
"""

from __future__ import annotations

import json

import pytest
from store_helpers import needs_sql, raw_sql

from planfence.shared_memory import (
    KIND_PLAN,
    AdvanceHead,
    AlreadyOwnedError,
    AssignOwner,
    AsyncStore,
    Decision,
    HeadConflictError,
    IntegrityError,
    InvalidKeyError,
    InvalidValueError,
    NotOwnerError,
    Record,
    StoreLimits,
    TransferOwner,
    UnknownKeyError,
    UnknownRecordError,
    ValueTooLargeError,
    WriteBatch,
    create_async_store,
)

REQ = "trip/42/requirements"
PLAN = "trip/42/plan"
QUOTE = "trip/42/quote"
MISSING = "0" * 64


async def _nothing_written(store: AsyncStore, ids: list[str], seq: int) -> None:
    assert await store.get_many(ids) == {}
    assert await store.changes(seq) == []
    assert await store.decisions() == []


# ---- records ----------------------------------------------------------------------------------


async def test_records_rehash_to_their_id(astore: AsyncStore) -> None:
    await astore.own(REQ, "planner")
    r1 = await astore.put(
        REQ, {"destination": "Lisbon", "nested": [1, 2.5, None, True]}, author="planner"
    )
    r2 = await astore.put(REQ, {"destination": "Porto"}, author="planner", parents=[r1.id])
    plan = await astore.add(PLAN, "go", author="planner", parents=[r2.id, r1.id], kind=KIND_PLAN)
    got = await astore.get_many([r1.id, r2.id, plan.id])
    assert set(got) == {r1.id, r2.id, plan.id}
    for original in (r1, r2, plan):
        rec = got[original.id]
        rec.verify()
        assert rec == original
        assert rec.id == Record.from_dict(json.loads(json.dumps(rec.to_dict()))).id
    assert got[plan.id].parents == tuple(sorted([r1.id, r2.id]))
    assert got[plan.id].kind == KIND_PLAN
    assert (await astore.get(r2.id)).value == {"destination": "Porto"}


async def test_returned_values_are_not_shared_with_the_store(astore: AsyncStore) -> None:
    await astore.own(REQ, "planner")
    rec = await astore.put(REQ, {"list": [1]}, author="planner")
    rec.value["list"].append(2)
    (await astore.get(rec.id)).value["list"].append(3)
    again = await astore.get(rec.id)
    assert again.value == {"list": [1]}
    again.verify()


async def test_get_unknown_and_malformed_ids(astore: AsyncStore) -> None:
    with pytest.raises(UnknownRecordError) as err:
        await astore.get(MISSING)
    assert err.value.ids == (MISSING,)
    with pytest.raises(InvalidValueError):
        await astore.get("not-an-id")
    assert await astore.get_many([MISSING]) == {}
    assert await astore.get_many([]) == {}


async def test_hand_built_record_with_a_wrong_id_is_refused(astore: AsyncStore) -> None:
    good = Record.create("facts/a", 1, author="bob")
    forged = Record(
        id=good.id, key="facts/a", value=2, parents=(), author="bob", created_at=good.created_at
    )
    with pytest.raises(IntegrityError):
        await astore.write(WriteBatch(records=(forged,)))
    assert await astore.get_many([good.id]) == {}
    await astore.write(WriteBatch(records=(good,)))
    assert (await astore.get(good.id)).value == 1


@pytest.mark.parametrize(
    ("column", "sqlite_value"),
    [
        ("value", '{"destination":"Tokyo"}'),
        ("value", '{"destination": "Lisbon"}'),  # same JSON, other bytes
        ("value", "not json"),
        ("key", "trip/43/requirements"),
        ("author", "mallory"),
        ("kind", "plan"),
        ("created_at", "2000-01-01T00:00:00.000000Z"),
        ("supersedes", MISSING),
    ],
)
async def test_tampered_row_raises_integrity_error(
    astore: AsyncStore, store_url: str, column: str, sqlite_value: str
) -> None:
    needs_sql(store_url)
    await astore.own(REQ, "planner")
    rec = await astore.put(REQ, {"destination": "Lisbon"}, author="planner")
    plan = await astore.add(PLAN, "p", author="planner", parents=[rec.id])
    raw_sql(store_url, f"UPDATE {{records}} SET {column} = ? WHERE id = ?", (sqlite_value, rec.id))
    with pytest.raises(IntegrityError) as err:
        await astore.get(rec.id)
    assert err.value.record_id == rec.id
    with pytest.raises(IntegrityError):
        await astore.get_many([rec.id])
    with pytest.raises(IntegrityError):
        await astore.frontier([plan.id], [REQ])
    (await astore.get(plan.id)).verify()  # the untouched record still reads


async def test_tampered_parents_raise_integrity_error(astore: AsyncStore, store_url: str) -> None:
    needs_sql(store_url)
    await astore.own(REQ, "planner")
    r1 = await astore.put(REQ, 1, author="planner")
    plan = await astore.add(PLAN, "p", author="planner", parents=[r1.id])
    other = [MISSING]
    value: object = json.dumps(other) if store_url.startswith("sqlite") else other
    raw_sql(store_url, "UPDATE {records} SET parents = ? WHERE id = ?", (value, plan.id))
    with pytest.raises(IntegrityError):
        await astore.get(plan.id)


async def test_short_ids_resolve_like_git(astore: AsyncStore) -> None:
    await astore.own(REQ, "planner")
    recs = [await astore.put(REQ, {"n": i}, author="planner") for i in range(40)]
    ids = sorted(r.id for r in recs)
    for rec in recs[:5]:
        assert await astore.resolve_id(rec.id[:8]) == rec.id
        assert await astore.resolve_id(rec.id[:12].upper()) == rec.id
        assert await astore.resolve_id(rec.id) == rec.id
    # The primitive behind it returns exactly the ids that start with the prefix, in order.
    for digit in "0123456789abcdef":
        want = [i for i in ids if i.startswith(digit)]
        assert await astore._ids_with_prefix(digit, 100) == want
    with pytest.raises(UnknownRecordError, match="prefix"):
        await astore.resolve_id(MISSING[:10])
    for bad in ("xyz", "", "abc1234", "g" * 9, "0" * 65, " " * 8):
        with pytest.raises(InvalidValueError):
            await astore.resolve_id(bad)


# ---- owners -----------------------------------------------------------------------------------


async def test_owner_is_assigned_once(astore: AsyncStore) -> None:
    assert await astore.owner(REQ) is None
    change = await astore.own(REQ, "planner")
    assert (change.kind, change.key, change.owner, change.by, change.head) == (
        "owner",
        REQ,
        "planner",
        "planner",
        None,
    )
    assert await astore.owner(REQ) == "planner"
    with pytest.raises(AlreadyOwnedError) as err:
        await astore.own(REQ, "executor")
    assert err.value.owner == "planner"
    assert await astore.owner(REQ) == "planner"
    with pytest.raises(UnknownKeyError):
        await astore.head("nobody/owns/this")
    assert await astore.head(REQ) is None


async def test_transfer_only_by_the_owner_and_recorded(astore: AsyncStore) -> None:
    await astore.own(REQ, "planner")
    r1 = await astore.put(REQ, 1, author="planner")
    with pytest.raises(NotOwnerError) as err:
        await astore.transfer(REQ, "mallory", by="mallory")
    assert (err.value.agent, err.value.owner) == ("mallory", "planner")
    change = await astore.transfer(REQ, "reviewer", by="planner")
    assert (change.kind, change.owner, change.by, change.head) == (
        "owner",
        "reviewer",
        "planner",
        r1.id,
    )
    assert await astore.owner(REQ) == "reviewer"
    assert await astore.head(REQ) == r1.id  # a transfer keeps the head
    with pytest.raises(NotOwnerError):
        await astore.put(REQ, 2, author="planner")
    with pytest.raises(NotOwnerError):
        await astore.transfer(REQ, "planner", by="planner")
    r2 = await astore.put(REQ, 2, author="reviewer", expected_head=r1.id)
    feed = await astore.changes()
    assert [(c.kind, c.owner, c.by) for c in feed] == [
        ("owner", "planner", "planner"),
        ("head", "planner", "planner"),
        ("owner", "reviewer", "planner"),
        ("head", "reviewer", "reviewer"),
    ]
    assert feed[-1].head == r2.id
    with pytest.raises(UnknownKeyError):
        await astore.transfer("no/such/key", "x", by="y")


async def test_own_by_records_who_assigned(astore: AsyncStore) -> None:
    change = await astore.own(REQ, "planner", by="admin")
    assert (change.owner, change.by) == ("planner", "admin")


# ---- heads ------------------------------------------------------------------------------------


async def test_compare_and_set_heads(astore: AsyncStore) -> None:
    await astore.own(REQ, "planner")
    r1 = await astore.put(REQ, 1, author="planner", expected_head=None)
    assert await astore.head(REQ) == r1.id
    with pytest.raises(HeadConflictError) as err:
        await astore.put(REQ, 2, author="planner", expected_head=None)
    assert (err.value.key, err.value.expected, err.value.current) == (REQ, None, r1.id)
    r2 = await astore.put(REQ, 2, author="planner", expected_head=r1.id, parents=[r1.id])
    with pytest.raises(HeadConflictError) as err:
        await astore.put(REQ, 3, author="planner", expected_head=r1.id)
    assert err.value.current == r2.id
    r3 = await astore.put(REQ, 3, author="planner")  # CURRENT: the head read just before
    assert await astore.head(REQ) == r3.id
    states = await astore.states([REQ, "unowned/key"])
    assert list(states) == [REQ]
    assert (states[REQ].owner, states[REQ].head, states[REQ].version) == ("planner", r3.id, 3)
    assert await astore.heads([REQ]) == {REQ: r3.id}


async def test_only_the_owner_advances(astore: AsyncStore) -> None:
    await astore.own(REQ, "planner")
    r1 = await astore.put(REQ, 1, author="planner")
    seq = await astore.last_seq()
    for expected in (r1.id, None):
        with pytest.raises(NotOwnerError):
            await astore.put(REQ, 2, author="executor", expected_head=expected)
    with pytest.raises(NotOwnerError):
        await astore.put(REQ, 2, author="executor")
    with pytest.raises(UnknownKeyError):
        await astore.put("unowned/key", 2, author="executor")
    assert await astore.head(REQ) == r1.id
    assert await astore.changes(seq) == []
    # a record the executor stored without a head cannot be made head by the executor either
    cand = await astore.add(REQ, 2, author="executor", parents=[r1.id])
    with pytest.raises(NotOwnerError):
        await astore.advance(REQ, cand.id, by="executor", expected_head=r1.id)
    await astore.advance(REQ, cand.id, by="planner", expected_head=r1.id)
    assert await astore.head(REQ) == cand.id


async def test_failed_cas_writes_nothing(astore: AsyncStore) -> None:
    await astore.own(REQ, "planner")
    r1 = await astore.put(REQ, 1, author="planner")
    seq = await astore.last_seq()
    rec = Record.create(REQ, 2, author="planner", parents=[r1.id])
    decision = Decision(source="test", verdict="deploy", plan=rec.id)
    for expected, by, error in (
        (None, "planner", HeadConflictError),
        (MISSING, "planner", HeadConflictError),
        (r1.id, "executor", NotOwnerError),
    ):
        batch = WriteBatch(
            records=(rec,), ops=(AdvanceHead(REQ, rec.id, expected, by),), decisions=(decision,)
        )
        with pytest.raises(error):
            await astore.write(batch)
        await _nothing_written(astore, [rec.id], seq)
    with pytest.raises(HeadConflictError):
        await astore.advance(REQ, r1.id, by="planner", expected_head=None, decisions=[decision])
    await _nothing_written(astore, [rec.id], seq)
    assert await astore.head(REQ) == r1.id


async def test_multi_key_batch_is_all_or_nothing(astore: AsyncStore) -> None:
    await astore.own("a/x", "planner")
    await astore.own("a/y", "planner")
    x1 = await astore.put("a/x", 1, author="planner")
    y1 = await astore.put("a/y", 1, author="planner")
    seq = await astore.last_seq()
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
    with pytest.raises(HeadConflictError):
        await astore.write(batch)
    await _nothing_written(astore, [x2.id, y2.id], seq)
    assert await astore.heads(["a/x", "a/y"]) == {"a/x": x1.id, "a/y": y1.id}
    assert await astore.owner("a/z") is None
    good = WriteBatch(
        records=(x2, y2),
        ops=(
            AdvanceHead("a/x", x2.id, x1.id, "planner"),
            AdvanceHead("a/y", y2.id, y1.id, "planner"),
            AssignOwner("a/z", "planner", "planner"),
            TransferOwner("a/z", "reviewer", "planner"),
        ),
    )
    changes = await astore.write(good)
    assert [c.seq for c in changes] == sorted(c.seq for c in changes)
    assert changes[0].seq > seq
    assert await astore.heads(["a/x", "a/y"]) == {"a/x": x2.id, "a/y": y2.id}
    assert await astore.owner("a/z") == "reviewer"


async def test_advance_checks_the_record(astore: AsyncStore) -> None:
    await astore.own(REQ, "planner")
    await astore.own(QUOTE, "planner")
    q = await astore.put(QUOTE, 1, author="planner")
    with pytest.raises(InvalidValueError):  # a version of another key
        await astore.advance(REQ, q.id, by="planner", expected_head=None)
    with pytest.raises(UnknownRecordError):
        await astore.advance(REQ, MISSING, by="planner", expected_head=None)
    assert await astore.head(REQ) is None


async def test_put_with_unknown_parent_writes_nothing(astore: AsyncStore) -> None:
    await astore.own(REQ, "planner")
    seq = await astore.last_seq()
    with pytest.raises(UnknownRecordError) as err:
        await astore.put(REQ, 1, author="planner", parents=[MISSING])
    assert err.value.ids == (MISSING,)
    assert await astore.head(REQ) is None
    assert await astore.changes(seq) == []


# ---- derived records --------------------------------------------------------------------------


async def test_add_derived_records(astore: AsyncStore) -> None:
    await astore.own(REQ, "planner")
    r1 = await astore.put(REQ, 1, author="planner")
    seq = await astore.last_seq()
    p1 = await astore.add(PLAN, {"steps": ["book"]}, author="planner", parents=[r1.id], kind="plan")
    p2 = await astore.add(
        PLAN, {"steps": ["rebook"]}, author="planner", parents=[r1.id], supersedes=p1.id
    )
    assert (await astore.get(p2.id)).supersedes == p1.id
    assert await astore.changes(seq) == []  # no head moved
    assert await astore.owner(PLAN) is None  # derived records need no owner


@pytest.mark.parametrize("field", ["parents", "supersedes"])
async def test_add_with_unknown_reference_writes_nothing(astore: AsyncStore, field: str) -> None:
    await astore.own(REQ, "planner")
    r1 = await astore.put(REQ, 1, author="planner")
    seq = await astore.last_seq()
    decision = Decision(source="gate", verdict="allow")
    kwargs: dict[str, object] = (
        {"parents": [r1.id, MISSING]} if field == "parents" else {"supersedes": MISSING}
    )
    with pytest.raises(UnknownRecordError) as err:
        await astore.add(PLAN, "p", author="planner", decisions=[decision], **kwargs)  # type: ignore[arg-type]
    assert err.value.ids == (MISSING,)
    assert await astore.changes(seq) == []
    assert await astore.decisions() == []
    # the id the record would have had: same fields, so look it up by the store's content
    assert [s.key for s in await astore.keys()] == [REQ]


async def test_add_unknown_parent_leaves_no_record(astore: AsyncStore) -> None:
    rec = Record.create(PLAN, "p", author="planner", parents=[MISSING])
    with pytest.raises(UnknownRecordError):
        await astore.write(WriteBatch(records=(rec,)))
    assert await astore.get_many([rec.id]) == {}
    # parents inside the same batch are fine
    base = Record.create(REQ, 1, author="planner")
    child = Record.create(PLAN, "p", author="planner", parents=[base.id])
    await astore.write(WriteBatch(records=(child, base)))
    assert set(await astore.get_many([base.id, child.id])) == {base.id, child.id}


# ---- frontier (SPEC "How planfence computes the frontier") --------------------------------------


async def _trip(store: AsyncStore) -> tuple[Record, Record, Record]:
    """r3 -> r4 (versions of REQ) and a quote derived from r3."""
    await store.own(REQ, "planner")
    r3 = await store.put(REQ, {"destination": "Lisbon"}, author="planner")
    r4 = await store.put(REQ, {"destination": "Porto"}, author="planner", parents=[r3.id])
    quote = await store.add(QUOTE, {"price": 100}, author="quoter", parents=[r3.id])
    return r3, r4, quote


async def test_frontier_is_a_set_per_key(astore: AsyncStore) -> None:
    r3, r4, _ = await _trip(astore)
    plan = await astore.add(PLAN, "p", author="planner", parents=[r3.id], kind="plan")
    fr = await astore.frontier([plan.id], [REQ, "trip/42/budget"])
    assert fr.versions == {REQ: frozenset({r3.id}), "trip/42/budget": frozenset()}
    assert fr.used(REQ) == {r3.id} != {await astore.head(REQ)}  # stale
    assert fr.complete
    assert fr.roots == (plan.id,)
    fresh = await astore.add(PLAN, "p2", author="planner", parents=[r4.id], supersedes=plan.id)
    assert (await astore.frontier([fresh.id], [REQ])).used(REQ) == {r4.id}


async def test_frontier_stops_at_records_of_scope_keys(astore: AsyncStore) -> None:
    r3, r4, _ = await _trip(astore)
    plan = await astore.add(PLAN, "p", author="planner", parents=[r4.id])
    fr = await astore.frontier([plan.id], [REQ])
    assert fr.used(REQ) == {r4.id}  # not r3, the history of r4
    assert r3.id not in fr.records
    assert fr.visited == 2
    # without REQ in scope the walk goes through r4 down to r3
    assert set((await astore.frontier([plan.id], [])).records) == {plan.id, r4.id, r3.id}


async def test_frontier_walks_through_other_records(astore: AsyncStore) -> None:
    r3, _, quote = await _trip(astore)
    summary = await astore.add("trip/42/summary", "s", author="x", parents=[quote.id])
    plan = await astore.add(PLAN, "p", author="planner", parents=[summary.id])
    fr = await astore.frontier([plan.id], [REQ])
    assert fr.used(REQ) == {r3.id}
    assert set(fr.records) == {plan.id, summary.id, quote.id, r3.id}
    # a scope key that is itself derived: the walk stops at the quote
    fr = await astore.frontier([plan.id], [REQ, QUOTE])
    assert fr.versions == {REQ: frozenset(), QUOTE: frozenset({quote.id})}


async def test_frontier_two_versions_via_two_paths(astore: AsyncStore) -> None:
    r3, r4, quote = await _trip(astore)
    plan = await astore.add(PLAN, "p", author="planner", parents=[quote.id, r4.id])
    fr = await astore.frontier([plan.id], [REQ])
    assert fr.used(REQ) == {r3.id, r4.id}
    assert fr.complete


async def test_frontier_of_several_roots_and_of_a_scope_record(astore: AsyncStore) -> None:
    r3, r4, quote = await _trip(astore)
    assert (await astore.frontier([r4.id], [REQ])).used(REQ) == {r4.id}
    fr = await astore.frontier([quote.id, r4.id, quote.id], [REQ])
    assert fr.roots == (quote.id, r4.id)
    assert fr.used(REQ) == {r3.id, r4.id}


async def test_frontier_reports_unknown_ids(astore: AsyncStore, store_url: str) -> None:
    r3, _, quote = await _trip(astore)
    fr = await astore.frontier([quote.id, MISSING], [REQ])
    assert fr.unknown == {MISSING}
    assert not fr.complete
    assert fr.used(REQ) == {r3.id}
    if store_url.startswith("memory://"):
        return
    # a parent row lost from the database: reported, not guessed
    raw_sql(store_url, "DELETE FROM {records} WHERE id = ?", (r3.id,))
    fr = await astore.frontier([quote.id], [REQ])
    assert fr.unknown == {r3.id}
    assert fr.used(REQ) == frozenset()
    assert not fr.complete


async def test_frontier_bound_is_reported_as_truncated(astore: AsyncStore) -> None:
    await astore.own("chain/x", "a")
    prev: list[str] = []
    for i in range(12):
        prev = [(await astore.add("chain/step", i, author="a", parents=prev)).id]
    fr = await astore.frontier(prev, ["chain/x"], max_records=5)
    assert fr.truncated
    assert not fr.complete
    assert fr.visited <= 5
    full = await astore.frontier(prev, ["chain/x"], max_records=12)
    assert not full.truncated
    assert full.visited == 12
    assert (await astore.lineage(prev[0])).visited == 12


async def test_frontier_at_depth(astore: AsyncStore) -> None:
    """A long derivation chain on top of one requirement version still finds it."""
    r3, _, _ = await _trip(astore)
    prev = [r3.id]
    for i in range(60):
        prev = [(await astore.add(f"steps/{i % 3}", i, author="a", parents=prev)).id]
    fr = await astore.frontier(prev, [REQ])
    assert fr.used(REQ) == {r3.id}
    assert fr.visited == 61
    assert fr.complete


# ---- limits -----------------------------------------------------------------------------------


async def test_value_size_limit(astore: AsyncStore) -> None:
    await astore.own(REQ, "planner")
    limit = astore.limits.max_value_bytes
    assert limit == 1 << 20
    exact = "x" * (limit - 2)  # canonical JSON adds the two quotes
    rec = await astore.put(REQ, exact, author="planner")
    assert (await astore.get(rec.id)).value == exact
    seq = await astore.last_seq()
    with pytest.raises(ValueTooLargeError) as err:
        await astore.put(REQ, exact + "x", author="planner")
    assert (err.value.size, err.value.limit) == (limit + 1, limit)
    assert "over the limit" in str(err.value)
    with pytest.raises(ValueTooLargeError):  # size counts UTF-8 bytes, not characters
        await astore.add(PLAN, "é" * (limit // 2), author="planner")
    assert await astore.changes(seq) == []


async def test_configured_limits(store_url: str) -> None:
    store = create_async_store(store_url, limits=StoreLimits(max_value_bytes=10, max_parents=1))
    async with store:
        await store.own(REQ, "planner")
        await store.put(REQ, "12345678", author="planner")
        with pytest.raises(ValueTooLargeError):
            await store.put(REQ, "123456789", author="planner")
        with pytest.raises(InvalidValueError):
            await store.add(PLAN, 1, author="a", parents=["a" * 64, "b" * 64])


@pytest.mark.parametrize(
    "key",
    ["", "/a", "a/", "a//b", "a b", "a\nb", "ключ", "a/../b/ c", "-x", "k" * 257, None, 42],
)
async def test_key_syntax(astore: AsyncStore, key: object) -> None:
    with pytest.raises(InvalidKeyError):
        await astore.own(key, "planner")  # type: ignore[arg-type]
    with pytest.raises(InvalidKeyError):
        await astore.add(key, 1, author="planner")  # type: ignore[arg-type]
    with pytest.raises(InvalidKeyError):
        await astore.head(key)  # type: ignore[arg-type]
    assert await astore.keys() == []


@pytest.mark.parametrize("agent", ["", "has space", "a/b", "x" * 129, None])
async def test_agent_syntax(astore: AsyncStore, agent: object) -> None:
    with pytest.raises(InvalidKeyError):
        await astore.own(REQ, agent)  # type: ignore[arg-type]
    with pytest.raises(InvalidKeyError):
        await astore.add(REQ, 1, author=agent)  # type: ignore[arg-type]
    assert await astore.keys() == []


async def test_valid_keys(astore: AsyncStore) -> None:
    for key in ("a", "trip/42/requirements", "order/A-1_b.c:d@e+f=g", "k" * 256):
        await astore.own(key, "o")
    assert len(await astore.keys()) == 4


@pytest.mark.parametrize(
    "value",
    [
        float("nan"),
        float("inf"),
        {"a": float("-inf")},
        object(),
        {1, 2},
        b"bytes",
        {1: "int key"},
        {"ok": {None: 1}},
        "lone \ud800 surrogate",
        [{"deep": [object()]}],
    ],
    ids=repr,
)
async def test_non_json_values(astore: AsyncStore, value: object) -> None:
    await astore.own(REQ, "planner")
    with pytest.raises(InvalidValueError):
        await astore.put(REQ, value, author="planner")
    with pytest.raises(InvalidValueError):
        await astore.add(PLAN, value, author="planner")
    assert await astore.head(REQ) is None


async def test_malformed_references(astore: AsyncStore) -> None:
    await astore.own(REQ, "planner")
    for parents in (["nope"], "a" * 64, ["A" * 64]):
        with pytest.raises(InvalidValueError):
            await astore.put(REQ, 1, author="planner", parents=parents)
    with pytest.raises(InvalidValueError):
        await astore.add(PLAN, 1, author="planner", supersedes="short")
    with pytest.raises(InvalidValueError):
        await astore.put(REQ, 1, author="planner", expected_head="bad")
    with pytest.raises(InvalidValueError):
        await astore.add(PLAN, 1, author="planner", kind="Not A Kind")


async def test_json_values_round_trip(astore: AsyncStore) -> None:
    await astore.own(REQ, "planner")
    values = [None, True, 0, -1, 2**70, 1.5, "", "ünïcode ✓ \x00", [], {}, {"b": [1, {"a": None}]}]
    for v in values:
        rec = await astore.put(REQ, v, author="planner")
        assert (await astore.get(rec.id)).value == v
    tup = await astore.put(REQ, (1, 2), author="planner")  # a tuple is a JSON array
    assert (await astore.get(tup.id)).value == [1, 2]


# ---- change feed ------------------------------------------------------------------------------


async def test_change_feed_order(astore: AsyncStore) -> None:
    await astore.own(REQ, "planner")
    heads = [None]
    for i in range(5):
        heads.append((await astore.put(REQ, i, author="planner")).id)
    await astore.own(QUOTE, "quoter")
    feed = await astore.changes()
    seqs = [c.seq for c in feed]
    assert seqs == sorted(seqs)
    assert len(set(seqs)) == len(seqs) == 7
    head_changes = [c for c in feed if c.kind == "head"]
    assert [c.head for c in head_changes] == heads[1:]
    assert [c.previous for c in head_changes] == heads[:-1]
    assert await astore.last_seq() == seqs[-1]
    assert await astore.changes(seqs[2], limit=2) == feed[3:5]
    assert await astore.changes(seqs[-1]) == []
    assert all(c.at for c in feed)
    assert feed[0].to_dict()["kind"] == "owner"


async def test_subscribe_yields_everything_then_idles_out(astore: AsyncStore) -> None:
    import asyncio

    await astore.own(REQ, "planner")
    first = await astore.put(REQ, 0, author="planner")

    async def writer() -> list[str]:
        ids = []
        for i in range(1, 6):
            await asyncio.sleep(0.01)
            ids.append((await astore.put(REQ, i, author="planner")).id)
        return ids

    task = asyncio.create_task(writer())
    seen = [c async for c in astore.subscribe(0, idle_timeout=1.0)]
    written = await task
    assert [c.head for c in seen if c.kind == "head"] == [first.id, *written]
    assert [c.seq for c in seen] == sorted({c.seq for c in seen})

    async def idle() -> list[object]:
        return [c async for c in astore.subscribe(seen[-1].seq, idle_timeout=0.2)]

    assert await asyncio.wait_for(idle(), 30) == []  # a hang guard, not a speed check


# ---- decision log -----------------------------------------------------------------------------


async def test_decision_log_filters(astore: AsyncStore) -> None:
    entries = [
        Decision(source="gate", verdict="allow", tool="book", plan="p1", agent="exec"),
        Decision(source="gate", verdict="block", tool="book", plan="p2", reason="stale"),
        Decision(source="gate", verdict="replan", tool="ship", plan="p2", agent="exec"),
        Decision(source="janus", verdict="keep", payload={"acc": [0.5, 0.75], "n": None}),
    ]
    for d in entries:
        await astore.log(d)
    everything = await astore.decisions()
    assert [d.verdict for d in everything] == ["keep", "replan", "block", "allow"]  # newest first
    ids = [d.id for d in everything]
    assert ids == sorted(ids, reverse=True)  # type: ignore[type-var]
    assert all(d.at for d in everything)
    assert everything[0].payload == {"acc": [0.5, 0.75], "n": None}
    assert [d.verdict for d in await astore.decisions(source="gate", tool="book")] == [
        "block",
        "allow",
    ]
    assert [d.verdict for d in await astore.decisions(plan="p2")] == ["replan", "block"]
    assert [d.verdict for d in await astore.decisions(agent="exec")] == ["replan", "allow"]
    assert [d.reason for d in await astore.decisions(verdict="block")] == ["stale"]
    assert [d.verdict for d in await astore.decisions(limit=2)] == ["keep", "replan"]
    assert await astore.decisions(source="nobody") == []
    assert everything[-1].to_dict()["tool"] == "book"


async def test_decisions_ride_with_a_write(astore: AsyncStore) -> None:
    await astore.own(REQ, "planner")
    r1 = await astore.put(REQ, 1, author="planner")
    cand = await astore.add(
        REQ, 2, author="updater", parents=[r1.id], decisions=[Decision("janus", "proposed")]
    )
    await astore.advance(
        REQ, cand.id, by="planner", expected_head=r1.id, decisions=[Decision("janus", "deploy")]
    )
    assert [d.verdict for d in await astore.decisions(source="janus")] == ["deploy", "proposed"]


# ---- keys -------------------------------------------------------------------------------------


async def test_keys_by_prefix(astore: AsyncStore) -> None:
    for key in ("trip/1/a", "trip/1/b", "trip/2/a", "order/9"):
        await astore.own(key, "o")
    assert [s.key for s in await astore.keys()] == ["order/9", "trip/1/a", "trip/1/b", "trip/2/a"]
    assert [s.key for s in await astore.keys("trip/1/")] == ["trip/1/a", "trip/1/b"]
    assert await astore.keys("zzz") == []
    assert [s.key for s in await astore.keys("trip/%")] == []  # no LIKE wildcards
