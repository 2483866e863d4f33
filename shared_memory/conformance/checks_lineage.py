"""The frontier (SPEC "How planfence computes the frontier") and read batches."""

from __future__ import annotations

from ..reads import GetChanges, GetKeys, GetRecords, Lineage, ListKeys
from ..records import Record
from ..store import AsyncStore
from .runner import TAMPER, Check, Context

REQ = "trip/42/requirements"
PLAN = "trip/42/plan"
QUOTE = "trip/42/quote"
MISSING = "0" * 64


async def trip(store: AsyncStore) -> tuple[Record, Record, Record]:
    """r3 -> r4 (versions of REQ) and a quote derived from r3."""
    await store.own(REQ, "planner")
    r3 = await store.put(REQ, {"destination": "Lisbon"}, author="planner")
    r4 = await store.put(REQ, {"destination": "Porto"}, author="planner", parents=[r3.id])
    quote = await store.add(QUOTE, {"price": 100}, author="quoter", parents=[r3.id])
    return r3, r4, quote


async def frontier_is_a_set_per_key(store: AsyncStore, ctx: Context) -> None:
    r3, r4, _ = await trip(store)
    plan = await store.add(PLAN, "p", author="planner", parents=[r3.id], kind="plan")
    fr = await store.frontier([plan.id], [REQ, "trip/42/budget"])
    assert fr.versions == {REQ: frozenset({r3.id}), "trip/42/budget": frozenset()}
    assert fr.used(REQ) == {r3.id} != {await store.head(REQ)}  # stale
    assert fr.complete
    assert fr.roots == (plan.id,)
    fresh = await store.add(PLAN, "p2", author="planner", parents=[r4.id], supersedes=plan.id)
    assert (await store.frontier([fresh.id], [REQ])).used(REQ) == {r4.id}


async def frontier_stops_at_records_of_scope_keys(store: AsyncStore, ctx: Context) -> None:
    r3, r4, _ = await trip(store)
    plan = await store.add(PLAN, "p", author="planner", parents=[r4.id])
    fr = await store.frontier([plan.id], [REQ])
    assert fr.used(REQ) == {r4.id}  # not r3, the history of r4
    assert r3.id not in fr.records
    assert fr.visited == 2
    # without REQ in scope the walk goes through r4 down to r3
    assert set((await store.frontier([plan.id], [])).records) == {plan.id, r4.id, r3.id}


async def frontier_walks_through_other_records(store: AsyncStore, ctx: Context) -> None:
    r3, _, quote = await trip(store)
    summary = await store.add("trip/42/summary", "s", author="x", parents=[quote.id])
    plan = await store.add(PLAN, "p", author="planner", parents=[summary.id])
    fr = await store.frontier([plan.id], [REQ])
    assert fr.used(REQ) == {r3.id}
    assert set(fr.records) == {plan.id, summary.id, quote.id, r3.id}
    # a scope key that is itself derived: the walk stops at the quote
    fr = await store.frontier([plan.id], [REQ, QUOTE])
    assert fr.versions == {REQ: frozenset(), QUOTE: frozenset({quote.id})}


async def frontier_two_versions_via_two_paths(store: AsyncStore, ctx: Context) -> None:
    r3, r4, quote = await trip(store)
    plan = await store.add(PLAN, "p", author="planner", parents=[quote.id, r4.id])
    fr = await store.frontier([plan.id], [REQ])
    assert fr.used(REQ) == {r3.id, r4.id}
    assert fr.complete
    assert (await store.frontier([r4.id], [REQ])).used(REQ) == {r4.id}
    fr = await store.frontier([quote.id, r4.id, quote.id], [REQ])
    assert fr.roots == (quote.id, r4.id)
    assert fr.used(REQ) == {r3.id, r4.id}


async def frontier_reports_unknown_ids(store: AsyncStore, ctx: Context) -> None:
    r3, _, quote = await trip(store)
    fr = await store.frontier([quote.id, MISSING], [REQ])
    assert fr.unknown == {MISSING}
    assert not fr.complete
    assert fr.used(REQ) == {r3.id}
    if not ctx.can(TAMPER):
        return
    # a parent lost from the store: reported, not guessed
    await ctx.tamper(store, r3.id, None)
    fr = await store.frontier([quote.id], [REQ])
    assert fr.unknown == {r3.id}
    assert fr.used(REQ) == frozenset()
    assert not fr.complete


async def frontier_bound_is_reported_as_truncated(store: AsyncStore, ctx: Context) -> None:
    await store.own("chain/x", "a")
    prev: list[str] = []
    for i in range(12):
        prev = [(await store.add("chain/step", i, author="a", parents=prev)).id]
    fr = await store.frontier(prev, ["chain/x"], max_records=5)
    assert fr.truncated
    assert not fr.complete
    assert fr.visited <= 5
    full = await store.frontier(prev, ["chain/x"], max_records=12)
    assert not full.truncated
    assert full.visited == 12
    assert (await store.lineage(prev[0])).visited == 12


async def frontier_at_depth(store: AsyncStore, ctx: Context) -> None:
    """A long derivation chain on top of one requirement version still finds it."""
    r3, _, _ = await trip(store)
    prev = [r3.id]
    for i in range(60):
        prev = [(await store.add(f"steps/{i % 3}", i, author="a", parents=prev)).id]
    fr = await store.frontier(prev, [REQ])
    assert fr.used(REQ) == {r3.id}
    assert fr.visited == 61
    assert fr.complete


async def read_batches_answer_each_op(store: AsyncStore, ctx: Context) -> None:
    r3, r4, quote = await trip(store)
    records, keys, listed, feed, lineage = await store.read(
        [
            GetRecords((r3.id, MISSING, quote.id)),
            GetKeys((REQ, "no/owner")),
            ListKeys("trip/"),
            GetChanges(1, 10),
            Lineage((quote.id,), (REQ,), 10),
        ]
    )
    assert set(records) == {r3.id, quote.id}
    assert records[quote.id] == quote
    assert list(keys) == [REQ]
    assert keys[REQ].head == r4.id
    assert [s.key for s in listed] == [REQ]
    assert [c.head for c in feed] == [r3.id, r4.id]
    # An optional op is answered None by a backend without it; a prefetch never misses the
    # root, nor (under the bound) anything the walk needs.
    assert lineage is None or {quote.id, r3.id} <= set(lineage)
    assert await store.read([]) == []


LINEAGE_CHECKS: tuple[Check, ...] = (
    frontier_is_a_set_per_key,
    frontier_stops_at_records_of_scope_keys,
    frontier_walks_through_other_records,
    frontier_two_versions_via_two_paths,
    frontier_reports_unknown_ids,
    frontier_bound_is_reported_as_truncated,
    frontier_at_depth,
    read_batches_answer_each_op,
)
