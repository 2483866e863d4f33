"""The frontier, memoised: F(r, D) per (record, scope), so a walk stops at records already seen.

Records are immutable, so a record's frontier over a scope never changes: F(r, D) is {r} when r's
key is in D (the walk stops there), and otherwise the union of F(p, D) over r's parents. It
depends on all of D (the walk stops at a record of *any* key in D), so the memo is keyed by the
whole scope. Only complete walks (no unknown id, cycle or bound) are remembered; `walk_frontier`
stays the reference, and a property test holds the two equal.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Iterable, Mapping

from .lineage import DEFAULT_MAX_RECORDS, Fetch, Frontier, find_cycle
from .records import Record

Reached = frozenset[tuple[str, str]]
"""A frontier as (key, record id) pairs."""
_EMPTY: Reached = frozenset()


class FrontierMemo:
    """A bounded, thread-safe map (record id, scope) -> F(record, scope)."""

    def __init__(self, capacity: int = 200_000) -> None:
        self.capacity = capacity
        self._entries: OrderedDict[tuple[str, frozenset[str]], Reached] = OrderedDict()
        # Frontier objects already built for one root: immutable, and asked for on every check.
        self._built: dict[tuple[str, frozenset[str]], Frontier] = {}
        self._lock = threading.Lock()

    def __len__(self) -> int:
        return len(self._entries)

    def get(self, record_id: str, scope: frozenset[str]) -> Reached | None:
        with self._lock:
            return self._entries.get((record_id, scope))

    def frontier(self, roots: Iterable[str], scope: Iterable[str]) -> Frontier | None:
        """The frontier of `roots` over `scope` when every root's is remembered (else None),
        without a walk: what `memo_walk` returns when it has nothing to read."""
        root_ids = tuple(dict.fromkeys(roots))
        keys = frozenset(scope)
        if len(root_ids) == 1:  # a plan checked before: its frontier, as last built
            found = self._built.get((root_ids[0], keys))
            if found is not None:
                return found
        versions: dict[str, set[str]] = {k: set() for k in keys}
        with self._lock:
            for rid in root_ids:
                hit = self._entries.get((rid, keys))
                if hit is None:
                    return None
                for key, version in hit:
                    versions[key].add(version)
        built = Frontier(
            roots=root_ids, versions={k: frozenset(v) for k, v in versions.items()}, visited=0
        )
        if len(root_ids) == 1:
            with self._lock:
                if len(self._built) >= self.capacity // 4:
                    self._built.clear()
                self._built[(root_ids[0], keys)] = built
        return built

    def put(self, found: Mapping[str, Reached], scope: frozenset[str]) -> None:
        with self._lock:
            for rid, reached in found.items():
                self._entries[(rid, scope)] = reached
                self._entries.move_to_end((rid, scope))
            while len(self._entries) > self.capacity:
                self._entries.popitem(last=False)


def memo_walk(
    roots: Iterable[str],
    scope: Iterable[str],
    memo: FrontierMemo,
    *,
    max_records: int = DEFAULT_MAX_RECORDS,
) -> Fetch:
    """`walk_frontier` that reads the roots, does not descend below records whose frontier the
    memo holds, and remembers the frontier of every record it walked through when the walk was
    complete.

    `visited` and `records` count and hold the records this walk read, not the whole lineage.
    """
    root_ids = tuple(dict.fromkeys(roots))
    keys = frozenset(scope)
    seen: dict[str, Record] = {}
    hits: dict[str, Reached] = {}
    unknown: set[str] = set()
    level = list(root_ids)
    truncated = False
    first = True
    while level:
        need = []
        for rid in level:
            # The roots are always read (one row each: a plan's parents are what it cites), so
            # a cycle through them is seen as the reference walk sees it; below them, the memo.
            hit = None if first else memo.get(rid, keys)
            if hit is None:
                need.append(rid)
            else:
                hits[rid] = hit
        first = False
        if not need:
            break
        if len(seen) + len(need) > max_records:
            truncated = True
            break
        found = yield need
        nxt: list[str] = []
        for rid in need:
            rec = found.get(rid)
            if rec is None:
                unknown.add(rid)
                continue
            seen[rid] = rec
            if rec.key not in keys:
                nxt.extend(p for p in rec.parents if p not in seen and p not in unknown)
        level = [p for p in dict.fromkeys(nxt) if p not in seen and p not in hits]
    # Nothing read (every root remembered, the common case of a check): nothing to learn.
    cycle = find_cycle(seen, keys) if seen else ()
    reached: set[tuple[str, str]] = {(r.key, rid) for rid, r in seen.items() if r.key in keys}
    for hit in hits.values():
        reached.update(hit)
    if seen and not (unknown or truncated or cycle):
        memo.put(_frontiers(seen, hits, keys), keys)
    versions: dict[str, set[str]] = {k: set() for k in keys}
    for key, rid in reached:
        versions[key].add(rid)
    return Frontier(
        roots=root_ids,
        versions={k: frozenset(v) for k, v in versions.items()},
        visited=len(seen),
        unknown=frozenset(unknown),
        truncated=truncated,
        cycle=cycle,
        records=seen,
    )


def _frontiers(
    seen: Mapping[str, Record], hits: Mapping[str, Reached], keys: frozenset[str]
) -> dict[str, Reached]:
    """F of every record of a complete, acyclic walk (iterative post-order: lineages are deep)."""
    out: dict[str, Reached] = dict(hits)
    for start in seen:
        stack = [start]
        while stack:
            rid = stack[-1]
            if rid in out:
                stack.pop()
                continue
            rec = seen[rid]
            if rec.key in keys:
                out[rid] = frozenset({(rec.key, rid)})
                stack.pop()
                continue
            todo = [p for p in rec.parents if p not in out]
            if todo:
                stack.extend(todo)
                continue
            parts = [out[p] for p in rec.parents]
            # A chain shares one frozenset all the way down instead of copying it per record.
            out[rid] = (
                parts[0] if len(parts) == 1 else frozenset().union(*parts) if parts else _EMPTY
            )
            stack.pop()
    return {rid: out[rid] for rid in seen}
