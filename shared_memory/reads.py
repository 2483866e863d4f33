"""Read operations: the typed, frozen questions a backend's `_read` answers in one snapshot.

A backend answers a batch of ops with one raw answer each (listed beside each op); the abstract
store turns record rows into verified `Record`s, so integrity is checked in one place. `Lineage`
is optional: a backend that cannot prefetch an ancestry in one query leaves it out of
`AsyncStore.optional_reads`, and the walk reads level by level instead.

Reads that depend on earlier answers are written as flows: generators that yield batches and
receive the answers (`frontier_flow`), driven by the store, in one hop where the backend can.
"""

from __future__ import annotations

from collections.abc import Callable, Generator, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from .journal import JournalQuery
from .lineage import DEFAULT_MAX_RECORDS, Frontier, walk_frontier
from .lineage_memo import FrontierMemo, memo_walk
from .records import Record

T = TypeVar("T")


@dataclass(frozen=True)
class GetRecords:
    """Stored rows of the records among `ids`. Raw answer: list[StoredFields]."""

    ids: tuple[str, ...]


@dataclass(frozen=True)
class GetKeys:
    """Owner and head of the owned keys among `keys`. Raw answer: list[KeyState]."""

    keys: tuple[str, ...]


@dataclass(frozen=True)
class ListKeys:
    """Every owned key starting with `prefix` (no wildcards), by key. Raw: list[KeyState]."""

    prefix: str


@dataclass(frozen=True)
class IdsWithPrefix:
    """Up to `limit` stored record ids starting with the lowercase hex `prefix`, sorted.
    Raw answer: list[str]."""

    prefix: str
    limit: int


@dataclass(frozen=True)
class GetChanges:
    """Feed entries with seq > `since`, in seq order, at most `limit`. Raw: list[Change]."""

    since: int
    limit: int


@dataclass(frozen=True)
class GetOwnerChanges:
    """The feed's owner changes of `key` with an epoch above `after_epoch`, in seq order (the
    chain of signed ownership claims a reader checks). Raw answer: list[Change]."""

    key: str
    after_epoch: int


@dataclass(frozen=True)
class QueryJournal:
    """Journal entries matching `query`, newest first. Raw answer: list[Entry]."""

    query: JournalQuery


@dataclass(frozen=True)
class Lineage:
    """Optional: rows of the ancestry of `roots`, not descending below records of `scope` keys,
    at most `limit` + 1 of them (so a cut walk is noticed). Raw answer: list[StoredFields]."""

    roots: tuple[str, ...]
    scope: tuple[str, ...]
    limit: int


ReadOp = (
    GetRecords
    | GetKeys
    | ListKeys
    | IdsWithPrefix
    | GetChanges
    | GetOwnerChanges
    | QueryJournal
    | Lineage
)
CORE_READS: frozenset[type[Any]] = frozenset(
    {GetRecords, GetKeys, ListKeys, IdsWithPrefix, GetChanges, GetOwnerChanges, QueryJournal}
)
"""The ops every backend answers; others are optional (see `AsyncStore.optional_reads`)."""

ReadFlow = Generator[Sequence[ReadOp], list[Any], T]
"""Yields batches of reads, receives their decoded answers, returns its result."""


def record_and_keys(ops: Sequence[ReadOp]) -> tuple[str, tuple[str, ...]] | None:
    """(record id, keys) when `ops` read one record and the states of some keys, as a gate's
    check does first (its plan and the heads of D(a)): a backend may answer them in one
    statement. None for any other batch."""
    if len(ops) != 2:
        return None
    record, keys = ops
    if type(record) is not GetRecords or type(keys) is not GetKeys:
        return None
    if len(record.ids) != 1 or not keys.keys:
        return None
    return record.ids[0], keys.keys


def frontier_flow(
    roots: Iterable[str], scope: Iterable[str], max_records: int = DEFAULT_MAX_RECORDS
) -> ReadFlow[Frontier]:
    """The lineage walk (`walk_frontier`) as reads: one prefetch where the backend has one, then
    only what the prefetch lacked."""
    root_ids, keys = tuple(dict.fromkeys(roots)), tuple(sorted(set(scope)))
    [prefetched] = yield [Lineage(root_ids, keys, max_records)]
    return (yield from walk_flow(root_ids, keys, max_records, prefetched or {}))


def walk_flow(
    roots: Iterable[str],
    scope: Iterable[str],
    max_records: int,
    prefetched: Mapping[str, Record],
) -> ReadFlow[Frontier]:
    """`walk_frontier` over `prefetched` records, reading level by level only the ids it lacks
    (unknown ids, or a prefetch cut at the bound)."""
    walk = walk_frontier(roots, scope, max_records=max_records)
    try:
        ids = next(walk)
        while True:
            got = {i: prefetched[i] for i in ids if i in prefetched}
            rest = tuple(i for i in ids if i not in prefetched)
            if rest:
                [found] = yield [GetRecords(rest)]
                got.update(found)
            ids = walk.send(got)
    except StopIteration as stop:
        result: Frontier = stop.value
        return result


def memo_walk_flow(
    roots: Iterable[str],
    scope: Iterable[str],
    max_records: int,
    memo: FrontierMemo,
    prefetched: Mapping[str, Record],
) -> ReadFlow[Frontier]:
    """`memo_walk` as reads: records below a remembered frontier are never read, so a plan on an
    already-walked lineage costs one row per parent; the first walk of a lineage prefetches it."""
    root_ids, keys = tuple(dict.fromkeys(roots)), tuple(sorted(set(scope)))
    remembered = memo.frontier(root_ids, keys)
    if remembered is not None:  # a plan checked before: nothing to read
        return remembered
    known = dict(prefetched)
    walk = memo_walk(root_ids, keys, memo, max_records=max_records)
    try:
        ids = next(walk)
        while True:
            rest = tuple(i for i in ids if i not in known)
            if rest:
                [ancestry] = yield [Lineage(rest, keys, max_records)]
                known.update(ancestry or {})
                missing = tuple(i for i in rest if i not in known)
                if missing:
                    [found] = yield [GetRecords(missing)]
                    known.update(found)
            ids = walk.send({i: known[i] for i in ids if i in known})
    except StopIteration as stop:
        result: Frontier = stop.value
        return result


def drive(flow: ReadFlow[T], answer: Callable[[Sequence[ReadOp]], list[Any]]) -> T:
    """Run a flow to its end, answering each batch with `answer` (a backend's own thread)."""
    try:
        ops = next(flow)
        while True:
            ops = flow.send(answer(ops))
    except StopIteration as stop:
        result: T = stop.value
        return result
