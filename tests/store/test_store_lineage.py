"""The pure frontier walk (`walk_frontier`) against fake lookups: cycles, bounds, unknown ids.

Content addressing makes a parent cycle impossible to store honestly, so cycles are built here
from hand-made `Record`s that no store would accept.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping

import pytest

from planfence.shared_memory import Record
from planfence.shared_memory.lineage import (
    Frontier,
    find_cycle,
    frontier_async,
    frontier_sync,
    walk_frontier,
)


def rid(name: str) -> str:
    return hashlib.sha256(name.encode()).hexdigest()


def rec(name: str, key: str, *parents: str) -> Record:
    return Record(
        id=rid(name), key=key, value=name, parents=tuple(rid(p) for p in parents), author="t"
    )


class FakeLookup:
    def __init__(self, *records: Record) -> None:
        self.db = {r.id: r for r in records}
        self.calls: list[list[str]] = []

    def __call__(self, ids: list[str]) -> Mapping[str, Record]:
        self.calls.append(list(ids))
        return {i: self.db[i] for i in ids if i in self.db}


def names(ids: frozenset[str] | set[str]) -> set[str]:
    known = {rid(n): n for n in "abcdefghijklmnopqrstuvwxyz"}
    known.update({rid(f"x{i}"): f"x{i}" for i in range(10)})
    return {known.get(i, i) for i in ids}


def test_cycle_is_reported_and_the_walk_ends() -> None:
    look = FakeLookup(rec("a", "plan", "b"), rec("b", "quote", "c"), rec("c", "sum", "b"))
    fr = frontier_sync(look, [rid("a")], ["req"])
    assert fr.cycle
    assert fr.cycle[0] == fr.cycle[-1]
    assert names(set(fr.cycle)) == {"b", "c"}
    assert not fr.complete
    assert fr.used("req") == frozenset()
    assert len(look.calls) == 3


def test_self_loop_is_a_cycle() -> None:
    fr = frontier_sync(FakeLookup(rec("a", "plan", "a")), [rid("a")], [])
    assert fr.cycle == (rid("a"), rid("a"))
    assert not fr.complete


def test_diamond_is_not_a_cycle() -> None:
    look = FakeLookup(
        rec("a", "plan", "b", "c"), rec("b", "q", "d"), rec("c", "q", "d"), rec("d", "req")
    )
    fr = frontier_sync(look, [rid("a")], ["req"])
    assert fr.cycle == ()
    assert names(fr.used("req")) == {"d"}
    assert fr.complete
    assert fr.visited == 4
    assert find_cycle(fr.records) == ()


def test_set_per_key_two_paths_and_stop_at_scope() -> None:
    look = FakeLookup(
        rec("a", "plan", "b", "e"),
        rec("b", "quote", "c"),
        rec("c", "req", "d"),  # an older version below c is history, not walked
        rec("d", "req"),
        rec("e", "req", "c"),
    )
    fr = frontier_sync(look, [rid("a")], ["req", "budget"])
    assert {k: names(v) for k, v in fr.versions.items()} == {"req": {"c", "e"}, "budget": set()}
    assert rid("d") not in fr.records
    assert all(rid("d") not in call for call in look.calls)


def test_unknown_ids_are_reported() -> None:
    look = FakeLookup(rec("a", "plan", "b", "z"), rec("b", "req"))
    fr = frontier_sync(look, [rid("a"), rid("y")], ["req"])
    assert names(fr.unknown) == {"z", "y"}
    assert names(fr.used("req")) == {"b"}
    assert not fr.complete


def test_bound_is_reported_as_truncated() -> None:
    chain = [rec(f"x{i}", "step", f"x{i + 1}") for i in range(9)] + [rec("x9", "req")]
    fr = frontier_sync(FakeLookup(*chain), [rid("x0")], ["req"], max_records=5)
    assert fr.truncated
    assert fr.used("req") == frozenset()
    assert not fr.complete
    exact = frontier_sync(FakeLookup(*chain), [rid("x0")], ["req"], max_records=10)
    assert not exact.truncated
    assert names(exact.used("req")) == {"x9"}


def test_too_many_roots_is_truncated_before_any_lookup() -> None:
    look = FakeLookup()
    fr = frontier_sync(look, [rid(n) for n in "abc"], [], max_records=2)
    assert fr.truncated
    assert look.calls == []


def test_generator_protocol() -> None:
    gen = walk_frontier([rid("a")], ["req"])
    assert next(gen) == [rid("a")]
    assert gen.send({rid("a"): rec("a", "plan", "b")}) == [rid("b")]
    with pytest.raises(StopIteration) as stop:
        gen.send({rid("b"): rec("b", "req")})
    fr: Frontier = stop.value.value
    assert names(fr.used("req")) == {"b"}


async def test_async_driver_matches_sync() -> None:
    look = FakeLookup(rec("a", "plan", "b", "c"), rec("b", "req"), rec("c", "q", "b", "d"))

    async def alook(ids: list[str]) -> Mapping[str, Record]:
        return look(ids)

    a = await frontier_async(alook, [rid("a")], ["req"])
    s = frontier_sync(look, [rid("a")], ["req"])
    assert a == s
    assert names(a.unknown) == {"d"}


async def test_an_ambiguous_short_id_lists_its_candidates() -> None:
    from planfence.shared_memory import UnknownRecordError
    from planfence.shared_memory.backends.memory import MemoryStore
    from planfence.shared_memory.errors import AmbiguousIdError

    store = MemoryStore()
    await store.own("a/b", "ana")
    rec = await store.put("a/b", 1, author="ana")
    # Two stored ids that share their first 10 digits (as 2^40 records would make likely).
    twin = rec.id[:10] + ("0" if rec.id[10] != "0" else "1") + rec.id[11:]
    store._records[twin] = (twin, *store._records[rec.id][1:])
    with pytest.raises(AmbiguousIdError) as err:
        await store.resolve_id(rec.id[:10])
    assert set(err.value.candidates) == {rec.id, twin}
    assert rec.id in str(err.value) and twin in str(err.value)
    assert isinstance(err.value, UnknownRecordError)
    assert await store.resolve_id(rec.id[:11]) == rec.id
