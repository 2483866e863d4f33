"""Hypothesis state machine: the store against a reference model made of plain dicts.

Invariants: only owners advance heads; compare-and-set never loses an update (the head is always
the last successful write, and a conflict reports it); every stored record re-hashes to its id;
the frontier of any record for any scope equals the model's, computed independently.
"""

from __future__ import annotations

import shutil
import tempfile
import uuid
from pathlib import Path

import hypothesis.strategies as st
import pytest
from hypothesis import HealthCheck, settings
from hypothesis.stateful import (
    RuleBasedStateMachine,
    invariant,
    precondition,
    rule,
    run_state_machine_as_test,
)

from planfence.shared_memory import (
    HeadConflictError,
    NotOwnerError,
    Store,
    UnknownKeyError,
    UnknownRecordError,
    open_store,
)
from planfence.shared_memory.errors import AlreadyOwnedError

KEYS = ("k/a", "k/b", "k/c")
AGENTS = ("alice", "bob")
MISSING = "0" * 64

keys = st.sampled_from(KEYS)
agents = st.sampled_from(AGENTS)
index = st.integers(min_value=0, max_value=1000)
values = st.one_of(
    st.integers(),
    st.text(max_size=8),
    st.lists(st.integers(), max_size=3),
    st.dictionaries(st.text(max_size=3), st.booleans(), max_size=2),
)


def model_frontier(
    records: dict[str, tuple[str, tuple[str, ...]]], roots: list[str], scope: set[str]
) -> tuple[dict[str, set[str]], set[str]]:
    """The SPEC's frontier, by depth-first recursion (the store walks breadth-first)."""
    versions: dict[str, set[str]] = {k: set() for k in scope}
    unknown: set[str] = set()
    seen: set[str] = set()

    def visit(rid: str) -> None:
        if rid in seen:
            return
        seen.add(rid)
        if rid not in records:
            unknown.add(rid)
            return
        key, parents = records[rid]
        if key in scope:
            versions[key].add(rid)
            return
        for p in parents:
            visit(p)

    for r in roots:
        visit(r)
    return versions, unknown


class StoreModel(RuleBasedStateMachine):
    open_url: str = ""  # set by the per-backend subclass

    def __init__(self) -> None:
        super().__init__()
        self.cleanup = lambda: None
        self.store: Store = self.make_store()
        self.owner: dict[str, str] = {}
        self.head: dict[str, str | None] = {}
        self.records: dict[str, tuple[str, tuple[str, ...]]] = {}
        self.order: list[str] = []
        self.advances = 0

    def make_store(self) -> Store:
        return open_store(self.open_url)

    def teardown(self) -> None:
        self.store.close()
        self.cleanup()

    def pick(self, i: int) -> str:
        return self.order[i % len(self.order)]

    def pick_parents(self, idx: list[int]) -> list[str]:
        return [self.pick(i) for i in idx] if self.order else []

    # ---- rules

    @rule(key=keys, agent=agents)
    def own(self, key: str, agent: str) -> None:
        if key in self.owner:
            with pytest.raises(AlreadyOwnedError):
                self.store.own(key, agent)
        else:
            self.store.own(key, agent)
            self.owner[key] = agent
            self.head[key] = None

    @rule(key=keys, to=agents, by=agents)
    def transfer(self, key: str, to: str, by: str) -> None:
        if key not in self.owner:
            with pytest.raises(UnknownKeyError):
                self.store.transfer(key, to, by=by)
        elif self.owner[key] != by:
            with pytest.raises(NotOwnerError):
                self.store.transfer(key, to, by=by)
        else:
            self.store.transfer(key, to, by=by)
            self.owner[key] = to

    @rule(
        key=keys,
        agent=agents,
        value=values,
        parents=st.lists(index, max_size=3),
        stale=st.booleans(),
        stale_pick=index,
    )
    def put(
        self, key: str, agent: str, value: object, parents: list[int], stale: bool, stale_pick: int
    ) -> None:
        parent_ids = self.pick_parents(parents)
        current = self.head.get(key)
        if stale:  # what a writer that missed an update would send
            options = [None, *[r for r, (k, _) in self.records.items() if k == key]]
            options = [o for o in options if o != current] or [MISSING]
            expected = options[stale_pick % len(options)]
        else:
            expected = current
        if key not in self.owner:
            with pytest.raises(UnknownKeyError):
                self.store.put(key, value, author=agent, parents=parent_ids, expected_head=expected)
        elif self.owner[key] != agent:
            with pytest.raises(NotOwnerError):
                self.store.put(key, value, author=agent, parents=parent_ids, expected_head=expected)
        elif expected != current:
            with pytest.raises(HeadConflictError) as err:
                self.store.put(key, value, author=agent, parents=parent_ids, expected_head=expected)
            assert err.value.current == current
        else:
            rec = self.store.put(
                key, value, author=agent, parents=parent_ids, expected_head=current
            )
            self._remember(rec.id, key, rec.parents)
            self.head[key] = rec.id
            self.advances += 1

    @rule(
        key=keys, agent=agents, value=values, parents=st.lists(index, max_size=3), bad=st.booleans()
    )
    def add(self, key: str, agent: str, value: object, parents: list[int], bad: bool) -> None:
        parent_ids = self.pick_parents(parents)
        if bad:
            with pytest.raises(UnknownRecordError):
                self.store.add(key, value, author=agent, parents=[*parent_ids, MISSING])
            return
        rec = self.store.add(key, value, author=agent, parents=parent_ids, kind="plan")
        self._remember(rec.id, key, rec.parents)

    @precondition(lambda self: bool(self.order))
    @rule(pick=index, by=agents, stale=st.booleans())
    def advance(self, pick: int, by: str, stale: bool) -> None:
        rid = self.pick(pick)
        key = self.records[rid][0]
        current = self.head.get(key)
        expected = (MISSING if current is None else None) if stale else current
        if key not in self.owner:
            with pytest.raises(UnknownKeyError):
                self.store.advance(key, rid, by=by, expected_head=expected)
        elif self.owner[key] != by:
            with pytest.raises(NotOwnerError):
                self.store.advance(key, rid, by=by, expected_head=expected)
        elif expected != current:
            with pytest.raises(HeadConflictError):
                self.store.advance(key, rid, by=by, expected_head=expected)
        else:
            self.store.advance(key, rid, by=by, expected_head=current)
            self.head[key] = rid
            self.advances += 1

    @precondition(lambda self: bool(self.order))
    @rule(
        roots=st.lists(index, min_size=1, max_size=2),
        scope=st.sets(keys),
        unknown_root=st.booleans(),
    )
    def frontier_matches_model(self, roots: list[int], scope: set[str], unknown_root: bool) -> None:
        root_ids = self.pick_parents(roots) + ([MISSING] if unknown_root else [])
        fr = self.store.frontier(root_ids, scope)
        versions, unknown = model_frontier(self.records, root_ids, scope)
        assert {k: set(v) for k, v in fr.versions.items()} == versions
        assert set(fr.unknown) == unknown
        assert not fr.truncated
        assert fr.cycle == ()

    def _remember(self, rid: str, key: str, parents: tuple[str, ...]) -> None:
        if rid not in self.records:
            self.records[rid] = (key, parents)
            self.order.append(rid)

    # ---- invariants

    @invariant()
    def heads_and_owners_match(self) -> None:
        states = self.store.states(KEYS)
        assert {k: s.owner for k, s in states.items()} == self.owner
        assert {k: s.head for k, s in states.items()} == self.head

    @invariant()
    def every_record_rehashes(self) -> None:
        got = self.store.get_many(self.order)
        assert set(got) == set(self.records)
        for rid, rec in got.items():
            rec.verify()
            assert (rec.key, rec.parents) == self.records[rid]

    @invariant()
    def feed_counts_every_advance(self) -> None:
        heads = [c for c in self.store.iter_changes() if c.kind == "head"]
        assert len(heads) == self.advances
        last: dict[str, str | None] = {}
        for c in heads:  # CAS: each advance starts from the head before it
            assert c.previous == last.get(c.key)
            last[c.key] = c.head
        for key, head in last.items():
            assert self.head[key] == head


class SQLiteModel(StoreModel):
    def make_store(self) -> Store:
        tmp = tempfile.mkdtemp(prefix="pf-stateful-")
        self.cleanup = lambda: shutil.rmtree(tmp, ignore_errors=True)
        return open_store(f"sqlite:///{Path(tmp) / 'store.db'}")


def run(machine: type[RuleBasedStateMachine], examples: int, steps: int) -> None:
    run_state_machine_as_test(
        machine,
        settings=settings(
            max_examples=examples,
            stateful_step_count=steps,
            deadline=None,
            database=None,
            suppress_health_check=[HealthCheck.too_slow],
        ),
    )


def test_model_memory() -> None:
    class MemoryModel(StoreModel):
        open_url = "memory://"

    run(MemoryModel, examples=60, steps=30)


def test_model_sqlite() -> None:
    run(SQLiteModel, examples=25, steps=25)


def test_model_postgres(pg_url: str) -> None:
    base, _, _ = pg_url.partition("?")
    from store_helpers import raw_sql

    class PostgresModel(StoreModel):
        def make_store(self) -> Store:
            schema = f"pf_sm_{uuid.uuid4().hex[:12]}"
            url = f"{base}?schema={schema}"
            self.cleanup = lambda: raw_sql(url, f"DROP SCHEMA IF EXISTS {schema} CASCADE")
            return open_store(url)

    run(PostgresModel, examples=6, steps=20)
