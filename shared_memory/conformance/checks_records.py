"""Records: content addressing, integrity, id prefixes, values and their limits."""

from __future__ import annotations

import json

from ..batches import WriteBatch
from ..errors import (
    IntegrityError,
    InvalidValueError,
    UnknownRecordError,
    ValueTooLargeError,
)
from ..reads import IdsWithPrefix
from ..records import KIND_PLAN, Record, StoreLimits
from ..store import AsyncStore
from .runner import TAMPER, Check, Context, raises

REQ = "trip/42/requirements"
PLAN = "trip/42/plan"
MISSING = "0" * 64


async def records_rehash_to_their_id(store: AsyncStore, ctx: Context) -> None:
    await store.own(REQ, "planner")
    r1 = await store.put(
        REQ, {"destination": "Lisbon", "nested": [1, 2.5, None, True]}, author="planner"
    )
    r2 = await store.put(REQ, {"destination": "Porto"}, author="planner", parents=[r1.id])
    plan = await store.add(PLAN, "go", author="planner", parents=[r2.id, r1.id], kind=KIND_PLAN)
    got = await store.get_many([r1.id, r2.id, plan.id])
    assert set(got) == {r1.id, r2.id, plan.id}
    for original in (r1, r2, plan):
        rec = got[original.id]
        rec.verify()
        assert rec == original
        assert rec.id == Record.from_dict(json.loads(json.dumps(rec.to_dict()))).id
    assert got[plan.id].parents == tuple(sorted([r1.id, r2.id]))
    assert got[plan.id].kind == KIND_PLAN
    assert (await store.get(r2.id)).value == {"destination": "Porto"}


async def returned_values_are_not_shared_with_the_store(store: AsyncStore, ctx: Context) -> None:
    await store.own(REQ, "planner")
    rec = await store.put(REQ, {"list": [1]}, author="planner")
    rec.value["list"].append(2)
    (await store.get(rec.id)).value["list"].append(3)
    again = await store.get(rec.id)
    assert again.value == {"list": [1]}
    again.verify()


async def get_unknown_and_malformed_ids(store: AsyncStore, ctx: Context) -> None:
    with raises(UnknownRecordError) as err:
        await store.get(MISSING)
    assert err.value.ids == (MISSING,)
    with raises(InvalidValueError):
        await store.get("not-an-id")
    assert await store.get_many([MISSING]) == {}
    assert await store.get_many([]) == {}


async def hand_built_record_with_a_wrong_id_is_refused(store: AsyncStore, ctx: Context) -> None:
    good = Record.create("facts/a", 1, author="bob")
    forged = Record(
        id=good.id, key="facts/a", value=2, parents=(), author="bob", created_at=good.created_at
    )
    with raises(IntegrityError):
        await store.write(WriteBatch(records=(forged,)))
    assert await store.get_many([good.id]) == {}
    await store.write(WriteBatch(records=(good,)))
    assert (await store.get(good.id)).value == 1


TAMPERED = [
    ("value_json", '{"destination":"Tokyo"}'),
    ("value_json", '{"destination": "Lisbon"}'),  # same JSON, other bytes
    ("value_json", "not json"),
    ("key", "trip/43/requirements"),
    ("author", "mallory"),
    ("kind", "plan"),
    ("created_at", "2000-01-01T00:00:00.000000Z"),
    ("supersedes", MISSING),
    ("parents", (MISSING,)),
]


async def tampered_records_raise_integrity_errors(store: AsyncStore, ctx: Context) -> None:
    ctx.require(TAMPER)
    await store.own(REQ, "planner")
    for n, (field, value) in enumerate(TAMPERED):
        rec = await store.put(REQ, {"destination": "Lisbon", "n": n}, author="planner")
        plan = await store.add(PLAN, n, author="planner", parents=[rec.id])
        await store.frontier([plan.id], [REQ])  # read (and cached) before the change
        if field == "value_json" and n == 1:
            value = json.dumps({"destination": "Lisbon", "n": n})  # same JSON, other bytes
        await ctx.tamper(store, rec.id, {field: value})
        with raises(IntegrityError) as err:
            await store.get(rec.id)
        assert err.value.record_id == rec.id, field
        with raises(IntegrityError):
            await store.get_many([rec.id])
        with raises(IntegrityError):
            await store.frontier([plan.id], [REQ])
        (await store.get(plan.id)).verify()  # the untouched record still reads


async def short_ids_resolve_like_git(store: AsyncStore, ctx: Context) -> None:
    await store.own(REQ, "planner")
    recs = [await store.put(REQ, {"n": i}, author="planner") for i in range(40)]
    ids = sorted(r.id for r in recs)
    for rec in recs[:5]:
        assert await store.resolve_id(rec.id[:8]) == rec.id
        assert await store.resolve_id(rec.id[:12].upper()) == rec.id
        assert await store.resolve_id(rec.id) == rec.id
    # The read behind it returns exactly the ids that start with the prefix, in order.
    for digit in "0123456789abcdef":
        want = [i for i in ids if i.startswith(digit)]
        assert await store.read([IdsWithPrefix(digit, 100)]) == [want]
    with raises(UnknownRecordError, match="prefix"):
        await store.resolve_id(MISSING[:10])
    for bad in ("xyz", "", "abc1234", "g" * 9, "0" * 65, " " * 8):
        with raises(InvalidValueError):
            await store.resolve_id(bad)


async def value_size_limit(store: AsyncStore, ctx: Context) -> None:
    await store.own(REQ, "planner")
    limit = store.limits.max_value_bytes
    assert limit == 1 << 20
    exact = "x" * (limit - 2)  # canonical JSON adds the two quotes
    rec = await store.put(REQ, exact, author="planner")
    assert (await store.get(rec.id)).value == exact
    seq = await store.last_seq()
    with raises(ValueTooLargeError) as err:
        await store.put(REQ, exact + "x", author="planner")
    assert (err.value.size, err.value.limit) == (limit + 1, limit)
    assert "over the limit" in str(err.value)
    with raises(ValueTooLargeError):  # size counts UTF-8 bytes, not characters
        await store.add(PLAN, "é" * (limit // 2), author="planner")
    assert await store.changes(seq) == []


async def configured_limits(store: AsyncStore, ctx: Context) -> None:
    async with ctx.open(StoreLimits(max_value_bytes=10, max_parents=1)) as small:
        await small.own(REQ, "planner")
        await small.put(REQ, "12345678", author="planner")
        with raises(ValueTooLargeError):
            await small.put(REQ, "123456789", author="planner")
        with raises(InvalidValueError):
            await small.add(PLAN, 1, author="a", parents=["a" * 64, "b" * 64])


NON_JSON: list[object] = [
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
]


async def non_json_values_are_refused(store: AsyncStore, ctx: Context) -> None:
    await store.own(REQ, "planner")
    for value in NON_JSON:
        with raises(InvalidValueError):
            await store.put(REQ, value, author="planner")
        with raises(InvalidValueError):
            await store.add(PLAN, value, author="planner")
    assert await store.head(REQ) is None


async def malformed_references_are_refused(store: AsyncStore, ctx: Context) -> None:
    await store.own(REQ, "planner")
    for parents in (["nope"], "a" * 64, ["A" * 64]):
        with raises(InvalidValueError):
            await store.put(REQ, 1, author="planner", parents=parents)
    with raises(InvalidValueError):
        await store.add(PLAN, 1, author="planner", supersedes="short")
    with raises(InvalidValueError):
        await store.put(REQ, 1, author="planner", expected_head="bad")
    with raises(InvalidValueError):
        await store.add(PLAN, 1, author="planner", kind="Not A Kind")


async def json_values_round_trip(store: AsyncStore, ctx: Context) -> None:
    await store.own(REQ, "planner")
    values: list[object] = [
        None,
        True,
        0,
        -1,
        2**70,
        1.5,
        "",
        "ünïcode ✓ \x00",
        [],
        {},
        {"b": [1, {"a": None}]},
    ]
    for v in values:
        rec = await store.put(REQ, v, author="planner")
        assert (await store.get(rec.id)).value == v
    tup = await store.put(REQ, (1, 2), author="planner")  # a tuple is a JSON array
    assert (await store.get(tup.id)).value == [1, 2]


RECORD_CHECKS: tuple[Check, ...] = (
    records_rehash_to_their_id,
    returned_values_are_not_shared_with_the_store,
    get_unknown_and_malformed_ids,
    hand_built_record_with_a_wrong_id_is_refused,
    tampered_records_raise_integrity_errors,
    short_ids_resolve_like_git,
    value_size_limit,
    configured_limits,
    non_json_values_are_refused,
    malformed_references_are_refused,
    json_values_round_trip,
)
