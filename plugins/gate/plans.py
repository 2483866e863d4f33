"""Plans are derived public records: their parents are exactly the record ids the planner read.

A replan is a new plan whose parents are the fresh records; it names the plan it replaces with
`supersedes` (not a parent), which is how the one-replan budget holds across processes.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from planfence.shared_memory import JSON, KIND_PLAN, AsyncStore, Record, Store

from .decision import Verdict


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
    """
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
    return store._run(
        create_plan(store.aio, author=author, parents=parents, value=value, supersedes=supersedes)
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
