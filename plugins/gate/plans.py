"""Plans are derived public records: their parents are exactly the record ids the planner read.

A replan is a new plan whose parents are the fresh records; it names the plan it replaces with
`supersedes` (not a parent), which is how the one-replan budget holds across processes.
`PlanStamper` is what adapters use: it stamps plans from read sets and keeps the chain.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Final

from planfence.shared_memory import JSON, AsyncStore, Record, Store, StoreBridge
from planfence.shared_memory.errors import InvalidValueError
from planfence.shared_memory.records import KIND_PLAN

from .decision import Verdict
from .reads import parents_of, read_heads


def plan_key(author: str) -> str:
    return f"plans/{author}"


async def create_plan(
    store: AsyncStore,
    *,
    author: str,
    parents: Iterable[str],
    value: JSON = None,
    supersedes: str | None = None,
) -> Record:
    """Store a plan derived from `parents` (record ids the planner read).

    Raises:
        UnknownRecordError: a parent or `supersedes` id the store does not hold.
        InvalidValueError: `supersedes` names a record that is not a plan.
    """
    if supersedes is not None:
        replaced = await store.get(supersedes)
        if replaced.kind != KIND_PLAN:
            raise InvalidValueError(
                f"supersedes {supersedes[:12]}: record {replaced.id[:12]} is a {replaced.kind} "
                f"of {replaced.key}, not a plan (give the id of the plan this one replaces)"
            )
    return await store.add(
        plan_key(author),
        {} if value is None else value,
        author=author,
        parents=parents,
        kind=KIND_PLAN,
        supersedes=supersedes,
    )


def create_plan_sync(
    store: Store,
    *,
    author: str,
    parents: Iterable[str],
    value: JSON = None,
    supersedes: str | None = None,
) -> Record:
    return store.portal.call(
        create_plan, store.aio, author=author, parents=parents, value=value, supersedes=supersedes
    )


def refreshed_parents(plan: Record, verdict: Verdict) -> list[str]:
    """The plan's parents with every stale version replaced by the current one.

    A convenience for planners whose plan cites the records it read directly; a planner that
    re-reads more than the stale records should pass its own read set instead.
    """
    swap: dict[str, str | None] = {}
    for stale in verdict.stale:
        for used in stale.used:
            swap[used] = stale.current
    out = [swap.get(p, p) for p in plan.parents]
    return [p for p in dict.fromkeys(out) if p is not None]


def current_values(verdict: Verdict) -> Mapping[str, Any]:
    """Key -> current value, from the records a replan verdict carries."""
    return {key: rec.value for key, rec in verdict.current_records.items()}


class _Chain:
    def __repr__(self) -> str:
        return "CHAIN"


CHAIN: Final = _Chain()
"""`supersedes=CHAIN`: the new plan supersedes the stamper's previous one."""

Reads = Mapping[str, str | Sequence[str]] | Iterable[str]


def _parents(reads: Reads) -> list[str]:
    if isinstance(reads, Mapping):
        return parents_of(reads)
    return list(dict.fromkeys(reads))


class PlanStamper:
    """Stamps one author's plans in a store, from what the planner read.

    A plan's parents are exactly the record ids read (a read set, key -> ids, or the ids
    themselves). From sync code: `stamper.bridge.run(stamper.stamp, reads, ...)`. Each plan
    supersedes the stamper's previous one, refused or not, unless the
    caller keeps the chain itself (graph state, a message thread) and says which plan the new
    one supersedes: the gate follows that chain for the one-replan budget.

    Args:
        store: an `AsyncStore`, a sync `Store`, a URL, or a `StoreBridge` to one.
        author: who plans; plans are stored under `plans/<author>`.
    """

    def __init__(self, store: AsyncStore | Store | StoreBridge | str, author: str) -> None:
        self.bridge = store if isinstance(store, StoreBridge) else StoreBridge(store)
        self.author = author
        self.last: str | None = None

    async def current(self, keys: Sequence[str], prefixes: Sequence[str] = ()) -> list[Record]:
        """The current records a planner is shown: every key in `keys` or under `prefixes`."""
        return await self.bridge.acall(read_heads, keys, prefixes)

    async def stamp(
        self,
        reads: Reads,
        *,
        value: JSON = None,
        supersedes: str | _Chain | None = CHAIN,
        author: str | None = None,
    ) -> Record:
        """Store a plan citing `reads`; it becomes the one the next plan supersedes."""
        plan = await self.bridge.acall(
            create_plan,
            author=author or self.author,
            parents=_parents(reads),
            value=value,
            supersedes=self.last if isinstance(supersedes, _Chain) else supersedes,
        )
        self.last = plan.id
        return plan

    def reset(self) -> None:
        """Start a new chain: the next plan supersedes nothing."""
        self.last = None
