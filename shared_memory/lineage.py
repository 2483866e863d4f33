"""The dependency frontier of a plan, as pure logic.

`walk_frontier` is a generator that yields batches of record ids it needs and receives the records
found; `frontier_sync` and `frontier_async` drive it against any lookup. Nothing here does I/O.

Rule (SPEC): walk parent links from the plan root(s). Records of keys in scope are collected and the
walk does not descend below them; other records are walked through. The result for key `x` is the
set of versions of `x` reached. Unknown ids, cycles and walks over the bound are reported, never
guessed.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Generator, Iterable, Mapping
from dataclasses import dataclass, field

from .records import Record

DEFAULT_MAX_RECORDS = 10_000


@dataclass(frozen=True)
class Frontier:
    """What a walk from `roots` found for each key in `scope`."""

    roots: tuple[str, ...]
    versions: Mapping[str, frozenset[str]]
    visited: int
    unknown: frozenset[str] = frozenset()
    truncated: bool = False
    cycle: tuple[str, ...] = ()
    records: Mapping[str, Record] = field(default_factory=dict, repr=False, compare=False)

    @property
    def complete(self) -> bool:
        """True when the walk saw every ancestor it needed (no unknown ids, cycle or bound)."""
        return not self.unknown and not self.truncated and not self.cycle

    def used(self, key: str) -> frozenset[str]:
        return self.versions.get(key, frozenset())


Fetch = Generator[list[str], Mapping[str, Record], Frontier]
Reached = frozenset[tuple[str, str]]
"""A frontier as (key, record id) pairs."""


def walk_frontier(
    roots: Iterable[str],
    scope: Iterable[str],
    *,
    max_records: int = DEFAULT_MAX_RECORDS,
    known: Callable[[str], Reached | None] | None = None,
) -> Fetch:
    """Compute the frontier; yields lists of ids to look up, receives what the store holds.

    `known` gives the frontier of a record below the roots when it is already known (as (key,
    id) pairs, see `lineage_memo`): the walk does not read it or descend below it. The roots
    are always read, so a cycle through them is seen.
    """
    root_ids = tuple(dict.fromkeys(roots))
    scope_keys = frozenset(scope)
    seen: dict[str, Record] = {}
    unknown: set[str] = set()
    versions: dict[str, set[str]] = {k: set() for k in scope_keys}
    level = list(root_ids)
    truncated = False
    below_roots = False
    while level:
        if known is not None and below_roots:
            level = [rid for rid in level if not _reached(known(rid), versions)]
            if not level:
                break
        below_roots = True
        if len(seen) + len(level) > max_records:
            truncated = True
            break
        found = yield level
        nxt: list[str] = []
        for rid in level:
            rec = found.get(rid)
            if rec is None:
                unknown.add(rid)
                continue
            seen[rid] = rec
            if rec.key in scope_keys:
                versions[rec.key].add(rid)
                continue
            for parent in rec.parents:
                if parent not in seen and parent not in unknown:
                    nxt.append(parent)
        level = list(dict.fromkeys(p for p in nxt if p not in seen))
    return Frontier(
        roots=root_ids,
        versions={k: frozenset(v) for k, v in versions.items()},
        visited=len(seen),
        unknown=frozenset(unknown),
        truncated=truncated,
        cycle=find_cycle(seen, scope_keys) if seen else (),
        records=seen,
    )


def _reached(pairs: Reached | None, versions: dict[str, set[str]]) -> bool:
    """Add a known frontier's (key, id) pairs to `versions`; False when it is not known."""
    if pairs is None:
        return False
    for key, rid in pairs:
        versions[key].add(rid)
    return True


def find_cycle(records: Mapping[str, Record], scope: Iterable[str] = ()) -> tuple[str, ...]:
    """A parent cycle among `records`, or (). Content addressing makes one impossible unless the
    store was tampered with, so finding one is a corruption signal.

    Only the edges a walk over `scope` follows count: a walk stops at a record of a key in
    `scope` and never reads past it, so what that record cites is not part of the lineage walked
    (and a walk that remembered the record's frontier would not see it either)."""
    white, grey, black = 0, 1, 2
    stops = frozenset(scope)
    color = dict.fromkeys(records, white)
    parents = {
        rid: [] if rec.key in stops else [p for p in rec.parents if p in records]
        for rid, rec in records.items()
    }
    for start in records:
        if color[start] != white:
            continue
        stack: list[tuple[str, int]] = [(start, 0)]
        path: list[str] = [start]
        color[start] = grey
        while stack:
            node, i = stack[-1]
            if i < len(parents[node]):
                stack[-1] = (node, i + 1)
                nxt = parents[node][i]
                if color[nxt] == grey:
                    return (*path[path.index(nxt) :], nxt)
                if color[nxt] == white:
                    color[nxt] = grey
                    stack.append((nxt, 0))
                    path.append(nxt)
            else:
                color[node] = black
                stack.pop()
                path.pop()
    return ()


def frontier_sync(
    lookup: Callable[[list[str]], Mapping[str, Record]],
    roots: Iterable[str],
    scope: Iterable[str],
    *,
    max_records: int = DEFAULT_MAX_RECORDS,
) -> Frontier:
    gen = walk_frontier(roots, scope, max_records=max_records)
    try:
        ids = next(gen)
        while True:
            ids = gen.send(lookup(ids))
    except StopIteration as stop:
        result: Frontier = stop.value
        return result


async def frontier_async(
    lookup: Callable[[list[str]], Awaitable[Mapping[str, Record]]],
    roots: Iterable[str],
    scope: Iterable[str],
    *,
    max_records: int = DEFAULT_MAX_RECORDS,
) -> Frontier:
    gen = walk_frontier(roots, scope, max_records=max_records)
    try:
        ids = next(gen)
        while True:
            ids = gen.send(await lookup(ids))
    except StopIteration as stop:
        result: Frontier = stop.value
        return result
