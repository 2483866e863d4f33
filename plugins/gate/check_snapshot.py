"""What one check reads, in one snapshot: the plan, its frontier, the heads, and a journal flag.

Built on the store's read flows, so it runs in one hop where the backend can (SQLite) and in two
statement batches on PostgreSQL (three for a plan that supersedes another).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import TypeVar
from weakref import WeakKeyDictionary

from planfence.shared_memory import (
    AsyncStore,
    Entry,
    GetKeys,
    GetRecords,
    JournalQuery,
    KeyState,
    Lineage,
    QueryJournal,
    Record,
    WriteBatch,
)
from planfence.shared_memory.journal import ToEntry
from planfence.shared_memory.lineage import DEFAULT_MAX_RECORDS, Frontier
from planfence.shared_memory.lineage_memo import FrontierMemo
from planfence.shared_memory.model import plain
from planfence.shared_memory.reads import ReadFlow, memo_walk_flow, walk_flow
from planfence.shared_memory.records import valid_keys, validate_record_id

from .rule import PlanView

T = TypeVar("T")


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
    return valid_keys(tuple(scope), store.limits)  # raises: not a key


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
    judge: Callable[[PlanView], T],
    entry: Callable[[T], Entry | ToEntry | None],
    *,
    max_records: int = DEFAULT_MAX_RECORDS,
    flag: Flag | None = None,
    memo: FrontierMemo | None = None,
) -> tuple[T, int | None]:
    """Read a snapshot, `judge` its view (pure, fast, no I/O), and append the journal entry
    `entry` makes of the judgement (None: nothing), in one store transaction (`transact`), in
    one hop where the backend can (SQLite). Returns the judgement and the entry's id."""
    keys = _scope(store, root_id, scope)

    def judged() -> ReadFlow[T]:
        snap = yield from snapshot_flow(root_id, keys, max_records, flag, memo)
        return judge(view_of(snap))

    def entry_batch(judgement: T) -> WriteBatch | None:
        made = entry(judgement)
        return None if made is None else WriteBatch(entries=(made,))

    # A plan checked before reads its own row and the heads (and maybe one journal row).
    short = _walked(memo, root_id, keys)
    result, written = await store.transact(judged(), entry_batch, short=short)
    return result, (written.entry_ids[0] if written is not None else None)


def view_of(snap: PlanSnapshot) -> PlanView:
    """What the rule reads of a snapshot."""
    if snap.root is None:
        return PlanView(None)
    return PlanView(snap.root, snap.frontier, snap.states, snap.superseded_flagged)
