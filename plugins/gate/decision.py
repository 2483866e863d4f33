"""The gate's check as a flow: load what the rule needs, then decide.

`gate_flow` yields the reads it needs (`LoadPlan`, `AskOwners`, `ReloadOwners`, `CheckBudget`,
`LoadRecords`) and receives their answers (or an `IOFailure`); it returns a `Verdict`. `Gate`
drives it against a store and a head source; tests drive it with plain dicts. The rule itself is
`rule.decide`; the verdict types are in `verdicts`. Both are re-exported here.
"""

from __future__ import annotations

from collections.abc import Generator, Mapping
from dataclasses import dataclass, replace
from typing import Any

from planfence.shared_memory import KeyState

from .policy import Policy
from .rule import (
    CheckRequest,
    HeadAnswer,
    PlanView,
    Problem,
    args_digest,
    base_verdict,
    decide,
    frontier_of,
    lineage_problem,
    owner_problem,
    plan_problem,
    resolve_call,
    stale_keys,
)
from .verdicts import (
    ALLOW,
    AUDIT_UNAVAILABLE,
    BLOCK,
    BLOCK_REASONS,
    CURRENT,
    HEAD_ROLLBACK,
    INCOMPLETE_LINEAGE,
    INTERNAL_ERROR,
    LINEAGE_TOO_LARGE,
    MISSING_PLAN,
    OWNER_EPOCH_STALE,
    OWNER_UNAUTHENTICATED,
    OWNER_UNREACHABLE,
    REPLAN,
    SCOPE_UNRESOLVED,
    STALE,
    STALE_AFTER_REPLAN,
    STORE_UNAVAILABLE,
    UNDECLARED_TOOL,
    UNGATED,
    UNKNOWN_PLAN,
    UNKNOWN_RECORD,
    Reason,
    StaleKey,
    Verdict,
    VerdictKind,
    fail_closed,
)

# ---- reads the flow asks for


@dataclass(frozen=True)
class LoadPlan:
    """Read the plan record, its frontier over `scope`, the owners/heads of `scope`, and whether
    the plan it supersedes was refused as stale."""

    plan_id: str
    scope: tuple[str, ...]
    max_records: int


@dataclass(frozen=True)
class AskOwners:
    """Ask each owner for the heads of its keys (one request per owner)."""

    owners: Mapping[str, tuple[str, ...]]


@dataclass(frozen=True)
class ReloadOwners:
    """Read the owners and heads of `keys` again (answer: their `KeyState`s by key): an owner
    said it no longer holds them, or holds them in a later epoch than the check had read."""

    keys: tuple[str, ...]


@dataclass(frozen=True)
class CheckBudget:
    """Was a replan already spent along the `supersedes` chain starting at `plan_id`? (True: a
    plan in the chain was refused as stale, with no gated allow since.)"""

    plan_id: str


@dataclass(frozen=True)
class LoadRecords:
    ids: tuple[str, ...]


@dataclass(frozen=True)
class IOFailure:
    """Sent into the flow instead of an answer when a read failed."""

    reason: str
    detail: str


IORequest = LoadPlan | AskOwners | ReloadOwners | CheckBudget | LoadRecords
Flow = Generator[IORequest, Any, Verdict]


def owners_of(scope: tuple[str, ...], states: Mapping[str, KeyState]) -> dict[str, tuple[str, ...]]:
    """One request per owner, for the keys of D(a) it owns."""
    owners: dict[str, list[str]] = {}
    for k in scope:
        if k in states:
            owners.setdefault(states[k].owner, []).append(k)
    return {o: tuple(ks) for o, ks in sorted(owners.items())}


def relearned(
    view: PlanView, moved: tuple[str, ...], fresh: Mapping[str, KeyState]
) -> tuple[PlanView, dict[str, tuple[str, ...]]]:
    """The view with the re-read states of `moved` keys (a key gone from the store loses its
    state), and the owners to ask again: those of the keys whose owner or epoch changed."""
    states = {k: s for k, s in view.states.items() if k not in moved}
    states.update({k: fresh[k] for k in moved if k in fresh})
    changed = tuple(
        k
        for k in moved
        if k in fresh
        and (fresh[k].owner, fresh[k].epoch) != (view.states[k].owner, view.states[k].epoch)
    )
    return replace(view, states=states), owners_of(changed, states)


def gate_flow(req: CheckRequest, policy: Policy, *, max_records: int = 10_000) -> Flow:
    """Load what `decide` needs (yielding each read), decide, and hand a replan its records."""
    pre = resolve_call(req, policy)
    if isinstance(pre, Verdict):
        return pre
    scope = pre

    def failed(io: IOFailure, **known: Any) -> Verdict:
        return req.verdict(BLOCK, io.reason, io.detail, scope, **known)

    view = yield LoadPlan(req.plan_id, scope, max_records)
    if isinstance(view, IOFailure):
        return failed(view)
    heads: Mapping[str, HeadAnswer] = {}
    if plan_problem(req, view) is None and lineage_problem(view, scope, max_records) is None:
        owners = owners_of(scope, view.states)
        if owners and all(k in view.states for k in scope):
            known = frontier_of(view.frontier, scope) if view.frontier is not None else {}
            answers = yield AskOwners(owners)
            if isinstance(answers, IOFailure):
                return failed(answers, frontier=known)
            heads = answers
            moved = tuple(k for k in scope if k in heads and heads[k].moved_on(view.states[k]))
            if moved:
                # Ownership moved since the snapshot: learn the new owners from the store and
                # ask them, once. What still disagrees afterwards blocks in `decide`.
                fresh = yield ReloadOwners(moved)
                if isinstance(fresh, IOFailure):
                    return failed(fresh, frontier=known)
                view, again = relearned(view, moved, fresh)
                if again:
                    more = yield AskOwners(again)
                    if isinstance(more, IOFailure):
                        return failed(more, frontier=known)
                    heads = {**heads, **more}
    verdict = decide(req, scope, view, heads, budget_spent=False, max_records=max_records)
    if verdict.verdict == REPLAN and view.plan is not None and view.plan.supersedes:
        # A replan's replan, possibly through plans that only made ungated calls.
        spent = yield CheckBudget(view.plan.supersedes)
        if isinstance(spent, IOFailure):
            return failed(spent, frontier=verdict.frontier, heads=verdict.heads)
        if spent:
            verdict = decide(req, scope, view, heads, budget_spent=True, max_records=max_records)
    if verdict.verdict != REPLAN:
        return verdict
    current_ids = tuple(s.current for s in verdict.stale if s.current)
    if not current_ids:
        return verdict
    got = yield LoadRecords(current_ids)
    if isinstance(got, IOFailure):
        return failed(got, frontier=verdict.frontier, heads=verdict.heads)
    records = {s.key: got[s.current] for s in verdict.stale if s.current and s.current in got}
    return replace(verdict, current_records=records)


__all__ = [
    "ALLOW",
    "AUDIT_UNAVAILABLE",
    "BLOCK",
    "BLOCK_REASONS",
    "CURRENT",
    "HEAD_ROLLBACK",
    "INCOMPLETE_LINEAGE",
    "INTERNAL_ERROR",
    "LINEAGE_TOO_LARGE",
    "MISSING_PLAN",
    "OWNER_EPOCH_STALE",
    "OWNER_UNAUTHENTICATED",
    "OWNER_UNREACHABLE",
    "REPLAN",
    "SCOPE_UNRESOLVED",
    "STALE",
    "STALE_AFTER_REPLAN",
    "STORE_UNAVAILABLE",
    "UNDECLARED_TOOL",
    "UNGATED",
    "UNKNOWN_PLAN",
    "UNKNOWN_RECORD",
    "AskOwners",
    "CheckBudget",
    "CheckRequest",
    "Flow",
    "HeadAnswer",
    "IOFailure",
    "IORequest",
    "LoadPlan",
    "LoadRecords",
    "PlanView",
    "Problem",
    "Reason",
    "ReloadOwners",
    "StaleKey",
    "Verdict",
    "VerdictKind",
    "args_digest",
    "base_verdict",
    "decide",
    "fail_closed",
    "frontier_of",
    "gate_flow",
    "lineage_problem",
    "owner_problem",
    "owners_of",
    "plan_problem",
    "relearned",
    "resolve_call",
    "stale_keys",
]
