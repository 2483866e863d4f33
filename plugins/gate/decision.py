"""The gate's check as a flow: load what the rule needs, then decide.

`gate_flow` yields the reads it needs (`LoadPlan`, `AskOwners`, `CheckBudget`, `LoadRecords`) and
receives their answers (or an `IOFailure`); it returns a `Verdict`. `Gate` drives it against a
store and a head source; tests drive it with plain dicts. The rule itself is `rule.decide`; the
verdict types are in `verdicts`. Both are re-exported here.
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
    INCOMPLETE_LINEAGE,
    INTERNAL_ERROR,
    LINEAGE_TOO_LARGE,
    MISSING_PLAN,
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


IORequest = LoadPlan | AskOwners | CheckBudget | LoadRecords
Flow = Generator[IORequest, Any, Verdict]


def owners_of(scope: tuple[str, ...], states: Mapping[str, KeyState]) -> dict[str, tuple[str, ...]]:
    """One request per owner, for the keys of D(a) it owns."""
    owners: dict[str, list[str]] = {}
    for k in scope:
        if k in states:
            owners.setdefault(states[k].owner, []).append(k)
    return {o: tuple(ks) for o, ks in sorted(owners.items())}


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
            answers = yield AskOwners(owners)
            if isinstance(answers, IOFailure):
                assert view.frontier is not None
                return failed(answers, frontier=frontier_of(view.frontier, scope))
            heads = answers
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
    "INCOMPLETE_LINEAGE",
    "INTERNAL_ERROR",
    "LINEAGE_TOO_LARGE",
    "MISSING_PLAN",
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
    "resolve_call",
    "stale_keys",
]
