"""What one check reads, in one snapshot: the plan, its frontier, the heads, and a journal flag.

Built on the store's read flows, so it runs in one hop where the backend can (SQLite) and in two
statement batches on PostgreSQL (three for a plan that supersedes another).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from functools import lru_cache
from weakref import WeakKeyDictionary

from planfence.shared_memory import (
    AsyncStore,
    Entry,
    Frontier,
    GetKeys,
    GetRecords,
    JournalQuery,
    KeyState,
    Lineage,
    QueryJournal,
    ReadFlow,
    Record,
    StoreLimits,
    ToEntry,
    WriteBatch,
    validate_key,
)
from planfence.shared_memory.lineage import DEFAULT_MAX_RECORDS
from planfence.shared_memory.lineage_memo import FrontierMemo
from planfence.shared_memory.model import plain
from planfence.shared_memory.reads import memo_walk_flow, walk_flow
from planfence.shared_memory.records import validate_record_id


@dataclass(frozen=True)
class Flag:
    """A question a snapshot answers about the plan its root supersedes: does the journal hold
    an entry of kind `source` about it, with one of `reasons`?"""

    source: str
    reasons: tuple[str, ...]

    def __post_init__(self) -> None:
        object.__setattr__(self, "reasons", tuple(plain(r) for r in self.reasons))

    def query(self, plan: str) -> JournalQuery:
        labels = {"reason": self.reasons}
        return JournalQuery.where(kind=self.source, subject=plan, labels=labels, limit=1)


@dataclass(frozen=True)
class PlanSnapshot:
    """A root record, its frontier over a scope, and the owners/heads of that scope."""

    root: Record | None
    frontier: Frontier | None = None
    states: Mapping[str, KeyState] = field(default_factory=dict)
    superseded_flagged: bool = False
    """The plan the root supersedes has a journal entry matching the snapshot's `flag`."""


_MEMOS: WeakKeyDictionary[AsyncStore, FrontierMemo] = WeakKeyDictionary()


def frontier_memo(store: AsyncStore) -> FrontierMemo:
    """The frontier memo of `store`, shared by every gate on it in this process."""
    memo = _MEMOS.get(store)
    if memo is None:
        memo = _MEMOS.setdefault(store, FrontierMemo())
    return memo


def snapshot_flow(
    root_id: str,
    scope: tuple[str, ...],
    max_records: int,
    flag: Flag | None,
    memo: FrontierMemo | None = None,
) -> ReadFlow[PlanSnapshot]:
    """The reads of a snapshot. The plan and the heads share the first batch (one instant);
    records are immutable, so the walk may read after it. With a memo, the walk reads the plan's
    parents only down to records whose frontier is remembered (the first time, it prefetches the
    lineage); without, the first batch prefetches the whole lineage. The flag is asked last, only
    for a plan that supersedes one."""
    first: Lineage | GetRecords = (
        GetRecords((root_id,)) if memo is not None else Lineage((root_id,), scope, max_records)
    )
    pre, states = yield [first, GetKeys(scope)]
    prefetched: Mapping[str, Record] = pre or {}
    root = prefetched.get(root_id)
    if root is None and memo is None:
        [found] = yield [GetRecords((root_id,))]
        root = found.get(root_id)
    if root is None:
        return PlanSnapshot(None)
    if memo is not None:
        frontier = yield from memo_walk_flow((root_id,), scope, max_records, memo, prefetched)
    else:
        frontier = yield from walk_flow((root_id,), scope, max_records, prefetched)
    flagged = False
    if root.supersedes and flag is not None:
        [hits] = yield [QueryJournal(flag.query(root.supersedes))]
        flagged = bool(hits)
    return PlanSnapshot(root, frontier, states if scope else {}, flagged)


def _walked(memo: FrontierMemo | None, root_id: str, keys: tuple[str, ...]) -> bool:
    """Whether the frontier of `root_id` over `keys` is remembered: its snapshot is then two
    statements (the plan's row and the heads), plus one journal row for a replanned plan."""
    return memo is not None and memo.frontier((root_id,), keys) is not None


def _scope(store: AsyncStore, root_id: str, scope: Iterable[str]) -> tuple[str, ...]:
    validate_record_id(root_id)
    keys = tuple(scope)
    if all(type(k) is str for k in keys):
        return _valid_scope(keys, store.limits)
    return tuple(sorted({validate_key(k, store.limits) for k in keys}))  # raises: not a key


@lru_cache(maxsize=1024)
def _valid_scope(scope: tuple[str, ...], limits: StoreLimits) -> tuple[str, ...]:
    """The keys of `scope`, checked against `limits`, sorted, once each. Remembered: a gate asks
    for the same few scopes on every check, and the answer depends on nothing else."""
    return tuple(sorted({validate_key(k, limits) for k in scope}))


async def snapshot(
    store: AsyncStore,
    root_id: str,
    scope: Iterable[str],
    *,
    max_records: int = DEFAULT_MAX_RECORDS,
    flag: Flag | None = None,
    memo: FrontierMemo | None = None,
) -> PlanSnapshot:
    """The record `root_id` (None if unknown), its frontier over `scope`, the owners and heads
    of `scope`, and (with `flag`) whether the plan it supersedes was flagged in the journal."""
    keys = _scope(store, root_id, scope)
    short = _walked(memo, root_id, keys)
    return await store.read_flow(snapshot_flow(root_id, keys, max_records, flag, memo), short=short)


async def snapshot_and_log(
    store: AsyncStore,
    root_id: str,
    scope: Iterable[str],
    decide: Callable[[PlanSnapshot], Entry | ToEntry | None],
    *,
    max_records: int = DEFAULT_MAX_RECORDS,
    flag: Flag | None = None,
    memo: FrontierMemo | None = None,
    short_ok: bool = True,
) -> tuple[PlanSnapshot, int | None]:
    """Read a snapshot, let `decide` (pure, fast, no I/O) turn it into a journal entry, and
    append that entry, in one hop where the backend can (SQLite). Returns the snapshot and the
    entry's id (None when `decide` returned None). `short_ok`: `decide` returns an entry as soon
    as the snapshot is read (no further I/O), so a plan whose lineage was walked before may be
    read and logged in one write transaction."""
    keys = _scope(store, root_id, scope)

    def entry_batch(snap: PlanSnapshot) -> WriteBatch | None:
        entry = decide(snap)
        return None if entry is None else WriteBatch(decisions=(entry,))

    # A plan checked before reads its own row and the heads (and maybe one journal row).
    short = short_ok and _walked(memo, root_id, keys)
    snap, written = await store.transact(
        snapshot_flow(root_id, keys, max_records, flag, memo), entry_batch, short=short
    )
    return snap, (written.entry_ids[0] if written is not None else None)
