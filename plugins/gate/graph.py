"""A plan's lineage as a graph an operator can read: which versions it used, which are current.

`plan_graph` is pure: it takes the records a lineage walk returned, the plan's `supersedes` chain
and the owners' current heads, and says for every key the plan depends on which version it used
and whether that version is still the head. `load_plan_graph` reads those three things from a
store. Renderers for text, DOT and Mermaid live with the command line and the UI.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from functools import cached_property
from typing import Any, Protocol

from planfence.shared_memory import Record
from planfence.shared_memory.lineage import Frontier, frontier_sync
from planfence.shared_memory.records import KIND_PLAN

MAX_CHAIN = 64
"""How many plans back the `supersedes` chain is followed (a chain is one replan per step)."""


@dataclass(frozen=True)
class Node:
    id: str
    key: str
    kind: str
    author: str
    current: bool
    """This record is its key's head right now."""
    headless: bool = False
    """Its key has no head (records added without advancing one)."""
    used: bool = False
    """The plan depends on this version (it is in the plan's frontier)."""
    missing: bool = False
    """A parent id the store does not hold."""


@dataclass(frozen=True)
class Used:
    key: str
    used: str
    current: str | None

    @property
    def stale(self) -> bool:
        """The key has a head and it is not the version used (a key nobody advanced is not)."""
        return self.current is not None and self.used != self.current


@dataclass(frozen=True)
class PlanGraph:
    root: str
    nodes: tuple[Node, ...]
    edges: tuple[tuple[str, str], ...]
    """(parent, child) pairs, each once."""
    used: tuple[Used, ...]
    """For each key the root depends on, the version it used and the key's head now."""
    supersedes: tuple[str, ...] = ()
    """The plans the root replaced, newest first."""
    complete: bool = True
    problems: tuple[str, ...] = ()

    @property
    def stale(self) -> tuple[Used, ...]:
        return tuple(u for u in self.used if u.stale)

    @cached_property
    def _by_id(self) -> dict[str, Node]:
        return {n.id: n for n in self.nodes}

    def node(self, rid: str) -> Node | None:
        return self._by_id.get(rid)

    def to_dict(self) -> dict[str, Any]:
        """The JSON shape served at `/api/plans/{id}` (without its decisions)."""
        return {
            "plan": self.root,
            "supersedes": list(self.supersedes),
            "nodes": [
                {
                    "id": n.id,
                    "key": n.key,
                    "kind": n.kind,
                    "author": n.author,
                    "current": n.current,
                    "headless": n.headless,
                    "used": n.used,
                    "missing": n.missing,
                }
                for n in self.nodes
            ],
            "edges": [list(e) for e in self.edges],
            "stale": [{"key": u.key, "used": u.used, "current": u.current} for u in self.stale],
            "used": [{"key": u.key, "used": u.used, "current": u.current} for u in self.used],
            "complete": self.complete,
            "problems": list(self.problems),
        }


def plan_graph(
    root: str,
    lineage: Frontier,
    heads: Mapping[str, str | None],
    chain: Sequence[str] = (),
) -> PlanGraph:
    """The graph of `root`'s ancestry in `lineage` (a walk with an empty scope), with the versions
    it used of every fact key marked against `heads` (key -> current head)."""
    records = lineage.records
    scope = {r.key for r in records.values() if r.kind != KIND_PLAN and r.id != root}
    root_rec = records.get(root)
    if root_rec is not None:
        scope.discard(root_rec.key)
    used_fr = frontier_sync(lambda ids: {i: records[i] for i in ids if i in records}, [root], scope)
    used = tuple(
        Used(key, rid, heads.get(key))
        for key in sorted(used_fr.versions)
        for rid in sorted(used_fr.versions[key])
    )
    used_ids = {u.used for u in used}
    nodes: list[Node] = []
    edges: list[tuple[str, str]] = []
    missing: set[str] = set()
    for rid in _order(root, records):
        rec = records[rid]
        head = heads.get(rec.key)
        nodes.append(
            Node(rid, rec.key, rec.kind, rec.author, head == rid, head is None, rid in used_ids)
        )
        for parent in dict.fromkeys(rec.parents):
            edges.append((parent, rid))
            if parent not in records:
                missing.add(parent)
    nodes += [Node(m, "?", "?", "?", False, missing=True) for m in sorted(missing)]
    problems = _problems(lineage)
    return PlanGraph(root, tuple(nodes), tuple(edges), used, tuple(chain), not problems, problems)


def _order(root: str, records: Mapping[str, Record]) -> list[str]:
    """Record ids breadth-first from the root (root first), each once."""
    order: list[str] = []
    seen: set[str] = set()
    level = [root]
    while level:
        nxt: list[str] = []
        for rid in level:
            if rid in seen or rid not in records:
                continue
            seen.add(rid)
            order.append(rid)
            nxt.extend(records[rid].parents)
        level = nxt
    return order


def _problems(fr: Frontier) -> tuple[str, ...]:
    out: list[str] = []
    if fr.unknown:
        out.append("unknown ids: " + ", ".join(sorted(fr.unknown)))
    if fr.cycle:
        out.append("cycle: " + " -> ".join(r[:12] for r in fr.cycle))
    if fr.truncated:
        out.append(f"walk stopped after {fr.visited} records")
    return tuple(out)


class GraphSource(Protocol):
    """The three reads a plan graph needs (the sync `Store` has them)."""

    def get(self, record_id: str) -> Record: ...

    def get_many(self, ids: Iterable[str]) -> dict[str, Record]: ...

    def lineage(self, record_id: str, *, max_records: int = ...) -> Frontier: ...

    def heads(self, keys: Iterable[str]) -> dict[str, str | None]: ...


def supersedes_chain(get: Callable[[str], Record | None], root: Record) -> list[str]:
    """The plans `root` replaced, newest first, stopping at a loop, a gap or `MAX_CHAIN`."""
    chain: list[str] = []
    nxt = root.supersedes
    while nxt and nxt not in chain and nxt != root.id and len(chain) < MAX_CHAIN:
        chain.append(nxt)
        rec = get(nxt)
        if rec is None:
            break
        nxt = rec.supersedes
    return chain


def load_plan_graph(
    store: GraphSource, root: str, *, max_records: int = 10_000, lineage: Frontier | None = None
) -> PlanGraph:
    """Read `root`'s ancestry (unless `lineage` already holds it), supersedes chain and the
    current heads of its keys."""
    root_rec = store.get(root)
    if lineage is None:
        lineage = store.lineage(root, max_records=max_records)
    chain = supersedes_chain(lambda rid: store.get_many([rid]).get(rid), root_rec)
    heads = store.heads(sorted({r.key for r in lineage.records.values()}))
    return plan_graph(root, lineage, heads, chain)
