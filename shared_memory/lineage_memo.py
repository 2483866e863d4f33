"""The frontier, memoised: F(r, D) per (record, scope), so a walk stops at records already seen.

Records are immutable, so a record's frontier over a scope never changes: F(r, D) is {r} when r's
key is in D (the walk stops there), and otherwise the union of F(p, D) over r's parents. It
depends on all of D (the walk stops at a record of *any* key in D), so the memo is keyed by the
whole scope. Only complete walks (no unknown id, cycle or bound) are remembered. `memo_walk` is
`walk_frontier` itself, told which records' frontiers are known; a property test holds the
memoised walk equal to the plain one.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Iterable, Mapping

from .lineage import DEFAULT_MAX_RECORDS, Fetch, Frontier, Reached, walk_frontier
from .records import Record

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
    """`walk_frontier` that does not descend below records whose frontier the memo holds, and
    remembers the frontier of every record it walked through when the walk was complete.

    `visited` and `records` count and hold the records this walk read, not the whole lineage.
    """
    keys = frozenset(scope)
    hits: dict[str, Reached] = {}

    def remembered(record_id: str) -> Reached | None:
        hit = memo.get(record_id, keys)
        if hit is not None:
            hits[record_id] = hit
        return hit

    found = yield from walk_frontier(roots, keys, max_records=max_records, known=remembered)
    # Nothing read (every root remembered, the common case of a check): nothing to learn.
    if found.records and found.complete:
        memo.put(_frontiers(found.records, hits, keys), keys)
    return found


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
