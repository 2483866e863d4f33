"""The memoised frontier (`memo_walk`) against the reference walk (`walk_frontier`), on random
DAGs and scopes sharing one memo: the memo may only skip reads, never change an answer."""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Mapping

from hypothesis import given, settings
from hypothesis import strategies as st

from planfence.shared_memory import Record
from planfence.shared_memory.lineage import Fetch, Frontier, frontier_sync
from planfence.shared_memory.lineage_memo import FrontierMemo, memo_walk

KEYS = ("a", "b", "c", "d", "e")


def rid(n: int) -> str:
    return hashlib.sha256(str(n).encode()).hexdigest()


@st.composite
def dags(draw: st.DrawFn) -> dict[str, Record]:
    """Records 0..n-1, each citing earlier ones; sometimes an id no record has (a lost row), and
    sometimes a later one (a cycle, which only tampering can make)."""
    n = draw(st.integers(1, 30))
    records = {}
    for i in range(n):
        parents = draw(st.lists(st.integers(0, max(i - 1, 0)), max_size=3)) if i else []
        if draw(st.integers(0, 30)) == 0:
            parents.append(1000 + i)  # unknown
        if i > 1 and draw(st.integers(0, 40)) == 0:
            parents.append(draw(st.integers(i, n - 1)))  # a cycle through a later record
        key = draw(st.sampled_from(KEYS))
        records[rid(i)] = Record(
            id=rid(i), key=key, value=i, parents=tuple(rid(p) for p in parents), author="t"
        )
    return records


def lookup(records: Mapping[str, Record]):  # type: ignore[no-untyped-def]
    def get(ids: list[str]) -> dict[str, Record]:
        return {i: records[i] for i in ids if i in records}

    return get


def drive(walk: Fetch, get: Callable[[list[str]], Mapping[str, Record]]) -> Frontier:
    try:
        ids = next(walk)
        while True:
            ids = walk.send(get(ids))
    except StopIteration as stop:
        result: Frontier = stop.value
        return result


def memo_frontier(
    records: Mapping[str, Record],
    roots: list[str],
    scope: frozenset[str],
    memo: FrontierMemo,
    max_records: int = 10_000,
) -> Frontier:
    return drive(memo_walk(roots, scope, memo, max_records=max_records), lookup(records))


@settings(max_examples=300, deadline=None)
@given(
    dags(),
    st.lists(
        st.tuples(
            st.lists(st.integers(0, 29), min_size=1, max_size=3), st.sets(st.sampled_from(KEYS))
        ),
        min_size=1,
        max_size=12,
    ),
)
def test_memo_matches_the_walk(
    records: dict[str, Record], queries: list[tuple[list[int], set[str]]]
) -> None:
    memo = FrontierMemo()
    n = len(records)
    for root_nums, scope_set in queries:
        roots = [rid(r % n) for r in root_nums]
        scope = frozenset(scope_set)
        ref = frontier_sync(lookup(records), roots, scope)
        got = memo_frontier(records, roots, scope, memo)
        assert got.versions == ref.versions
        assert got.unknown == ref.unknown
        assert bool(got.cycle) == bool(ref.cycle)
        assert got.complete == ref.complete
        again = memo_frontier(records, roots, scope, memo)  # now from the memo where complete
        assert again.versions == ref.versions and again.complete == ref.complete
        remembered = memo.frontier(roots, scope)  # no walk: only when every root is remembered
        if ref.complete:
            assert remembered is not None and remembered.versions == ref.versions
            assert remembered.complete
        else:
            assert remembered is None or remembered.versions == ref.versions


def test_a_cycle_beyond_a_scope_record_is_not_part_of_the_lineage() -> None:
    # 3 cites 4 and 4 (a record of the scope's key) cites 3: a tampered pair. A walk from 16
    # over {b} stops at 4 and never reads what 4 cites, so the cycle is not in the lineage it
    # walked; a walk that remembered 4's frontier from an earlier walk (18 -> 11 -> 4) agrees.
    parents = {3: [4], 4: [3], 11: [4], 16: [3], 18: [11]}
    keys = {4: "b"}
    records = {
        rid(n): Record(
            id=rid(n), key=keys.get(n, "a"), value=n, parents=tuple(rid(p) for p in ps), author="t"
        )
        for n, ps in parents.items()
    }
    memo = FrontierMemo()
    scope = frozenset({"b"})
    for root in (18, 16):
        ref = frontier_sync(lookup(records), [rid(root)], scope)
        got = memo_frontier(records, [rid(root)], scope, memo)
        assert ref.cycle == () and got.cycle == ()
        assert got.versions == ref.versions == {"b": frozenset({rid(4)})}
    # Through records the walk does follow, the cycle is still found (by both).
    ref = frontier_sync(lookup(records), [rid(16)], frozenset({"c"}))
    assert ref.cycle and memo_frontier(records, [rid(16)], frozenset({"c"}), memo).cycle


def test_a_plan_on_a_walked_lineage_reads_one_row_per_parent() -> None:
    records: dict[str, Record] = {}
    prev: list[str] = []
    facts = [Record.create(f"k/{i}", i, author="o") for i in range(4)]
    for f in facts:
        records[f.id] = f
    prev = [f.id for f in facts]
    for depth in range(100):
        note = Record.create("derived", depth, author="o", parents=prev)
        records[note.id] = note
        prev = [note.id]
    scope = frozenset(f.key for f in facts)
    memo = FrontierMemo()
    plans = [Record.create("plan", n, author="o", parents=prev) for n in range(3)]
    for plan in plans:
        records[plan.id] = plan
    reads: list[list[str]] = []

    def counted(ids: list[str]) -> dict[str, Record]:
        reads.append(ids)
        return lookup(records)(ids)

    first = frontier_sync(counted, [plans[0].id], scope)
    assert drive(memo_walk([plans[0].id], scope, memo), counted).versions == first.versions
    reads.clear()
    assert drive(memo_walk([plans[1].id], scope, memo), counted).versions == first.versions
    assert reads == [[plans[1].id]]  # the plan's own row; its parent's frontier is remembered
    assert len(memo) <= 2 * 103  # one entry per record walked


class ScopeBlindMemo(FrontierMemo):
    """The control: a memo that forgets the scope, as a per-key "versions reached" index would."""

    def get(self, record_id: str, scope: frozenset[str]) -> frozenset[tuple[str, str]] | None:
        return super().get(record_id, frozenset())

    def put(self, found: Mapping[str, frozenset[tuple[str, str]]], scope: frozenset[str]) -> None:
        super().put(found, frozenset())


def test_the_control_a_scope_blind_memo_gives_wrong_frontiers() -> None:
    req = Record.create("req", 1, author="o")
    quote = Record.create("quote", 2, author="o", parents=[req.id])
    plan = Record.create("plan", 3, author="o", parents=[quote.id])
    records = {r.id: r for r in (req, quote, plan)}
    for memo, agrees in ((FrontierMemo(), True), (ScopeBlindMemo(), False)):
        memo_frontier(records, [plan.id], frozenset({"req"}), memo)
        wide = frozenset({"req", "quote"})  # the walk now stops at the quote
        ref = frontier_sync(lookup(records), [plan.id], wide)
        assert (memo_frontier(records, [plan.id], wide, memo).versions == ref.versions) is agrees


def test_a_cycle_through_the_roots_is_seen_even_when_the_memo_knows_them() -> None:
    # Records 1 and 2 cite each other (only tampering can make that) and 2 cites 4, a record of
    # the scope's key. A first walk from 3 (citing 4) remembers F(4). A walk from the roots 1 and
    # 2 must still read them and see the cycle between them, as the reference walk does.
    a, b, c = rid(1), rid(2), rid(4)
    records = {
        a: Record(id=a, key="x", value=1, parents=(b,), author="t"),
        b: Record(id=b, key="x", value=2, parents=(a, c), author="t"),
        c: Record(id=c, key="a", value=4, parents=(), author="t"),
        rid(3): Record(id=rid(3), key="plan", value=3, parents=(c,), author="t"),
    }
    memo = FrontierMemo()
    scope = frozenset({"a"})
    assert memo_frontier(records, [rid(3)], scope, memo).complete
    assert memo.get(c, scope) is not None
    got = memo_frontier(records, [a, b], scope, memo)
    ref = frontier_sync(lookup(records), [a, b], scope)
    assert ref.cycle and got.cycle and not got.complete
