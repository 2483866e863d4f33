"""The gate's check as a flow: load what the rule needs, then decide.

`gate_flow` yields the reads it needs (`LoadPlan`, `AskOwners`, `ReloadOwners`, `Audited`,
`LoadRecords`) and receives their answers (or an `IOFailure`); it returns a `Verdict`. `Gate`
drives it against a store and a head source; tests drive it with plain dicts. It reads in three
stages, each a flow of its own: the plan's view (`LoadPlan`), the owners' heads and the rule
(`judge_flow`: the view's problems found once, then `rule.judge_heads` once), and for a replan
only, the budget along the `supersedes` chain and the current records (`replan_flow`). The rule
itself is in `rule`; the verdict types are in `verdicts`. Both are re-exported here.
"""

from __future__ import annotations

from collections.abc import Generator, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from planfence.shared_memory import KeyState
from planfence.shared_memory.records import is_record_id

from .call import ToolCall, args_digest
from .policy import Policy, ScopeError
from .rule import (
    CHECK_HINT,
    HeadAnswer,
    PlanView,
    Problem,
    base_verdict,
    decide,
    frontier_of,
    judge_heads,
    lineage_problem,
    owner_problem,
    plan_problem,
    replan_spent,
    stale_keys,
    view_problem,
)
from .verdicts import (
    AGENT_NOT_ALLOWED,
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
    """Ask each owner for the heads of its keys (one request per owner). `view` is what the
    check read, so a gate whose head source is the store answers from it."""

    owners: Mapping[str, tuple[str, ...]]
    view: PlanView | None = field(default=None, compare=False, repr=False)


@dataclass(frozen=True)
class ReloadOwners:
    """Read the owners and heads of `keys` again (answer: their `KeyState`s by key): an owner
    said it no longer holds them, or holds them in a later epoch than the check had read."""

    keys: tuple[str, ...]


@dataclass(frozen=True)
class Audited:
    """Does the audit log hold a gate decision about `plan_id` with one of `reasons`?"""

    plan_id: str
    reasons: tuple[str, ...]


@dataclass(frozen=True)
class LoadRecords:
    ids: tuple[str, ...]


@dataclass(frozen=True)
class IOFailure:
    """Sent into the flow instead of an answer when a read failed."""

    reason: str
    detail: str


IORequest = LoadPlan | AskOwners | ReloadOwners | Audited | LoadRecords
Flow = Generator[IORequest, Any, Verdict]
BUDGET_REASONS: tuple[str, ...] = (STALE, STALE_AFTER_REPLAN)
"""The refusals the one-replan budget is made of."""
MAX_SUPERSEDES_CHAIN = 64


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


def resolve_call(
    call: ToolCall, policy: Policy, base: Verdict | None = None
) -> Verdict | tuple[str, ...]:
    """The checks that need no reads, shared by the gate and the baselines: the tool's
    declaration, its scope D(a) for these arguments, and the plan reference's form. Returns the
    scope, or the verdict that ends the check (built from `base` when given)."""

    def end(kind: VerdictKind, reason: str, message: str, scope: tuple[str, ...] = ()) -> Verdict:
        if base is None:
            return call.verdict(kind, reason, message, scope)
        return replace(base, verdict=kind, reason=reason, message=message, scope=scope)

    tool = policy.get(call.tool)
    if tool is None:
        return end(BLOCK, UNDECLARED_TOOL, f"tool {call.tool!r} has no dependency declaration")
    if tool.agents is not None and call.agent not in tool.agents:
        who = ", ".join(sorted(tool.agents))
        return end(BLOCK, AGENT_NOT_ALLOWED, f"tool {call.tool!r} is for {who}, not {call.agent!r}")
    if tool.ungated:
        return end(ALLOW, UNGATED, "tool is declared ungated")
    try:
        scope = tool.scope(call.args)
    except ScopeError as exc:
        return end(BLOCK, SCOPE_UNRESOLVED, f"{exc} ({CHECK_HINT})")
    if not scope:  # a gated tool that depends on nothing cannot be proven current
        return end(BLOCK, UNDECLARED_TOOL, f"tool {call.tool!r} declares no dependencies")
    if call.plan is None or call.plan == "":
        return end(BLOCK, MISSING_PLAN, "the call carries no plan reference", scope)
    if not is_record_id(call.plan):
        message = f"malformed plan reference {str(call.plan)[:80]!r}"
        return end(BLOCK, UNKNOWN_PLAN, message, scope)
    return scope


def gate_flow(call: ToolCall, policy: Policy, *, max_records: int = 10_000) -> Flow:
    """Load what the rule needs (yielding each read), judge, and hand a replan its records."""
    pre = resolve_call(call, policy)
    if isinstance(pre, Verdict):
        return pre
    scope = pre
    view = yield LoadPlan(call.plan, scope, max_records)
    if isinstance(view, IOFailure):
        return failed(call, scope, view)
    verdict = yield from judge_flow(call, scope, view, max_records)
    return (yield from replan_flow(call, scope, view, verdict))


def failed(call: ToolCall, scope: tuple[str, ...], io: IOFailure, **known: Any) -> Verdict:
    """The block for a check whose read failed."""
    return call.verdict(BLOCK, io.reason, io.detail, scope, **known)


def judge_flow(call: ToolCall, scope: tuple[str, ...], view: PlanView, max_records: int) -> Flow:
    """The owners' heads (asked once; again, once, of the keys whose owner moved since the view
    was read), then the rule, once. Owners are asked only about a view that has a plan, its
    frontier and an owner for each key of D(a); the rule says what blocks any other."""
    heads: Mapping[str, HeadAnswer] = {}
    owners = owners_of(scope, view.states)
    if (
        view.plan is not None
        and view.frontier is not None
        and len(owners)
        and all(k in view.states for k in scope)
    ):
        known = frontier_of(view.frontier, scope)
        answers = yield AskOwners(owners, view)
        if isinstance(answers, IOFailure):
            return failed(call, scope, answers, frontier=known)
        heads = answers
        moved = tuple(k for k in scope if k in heads and heads[k].moved_on(view.states[k]))
        if moved:
            # Ownership moved since the snapshot: learn the new owners from the store and
            # ask them, once. What still disagrees afterwards blocks in the rule.
            fresh = yield ReloadOwners(moved)
            if isinstance(fresh, IOFailure):
                return failed(call, scope, fresh, frontier=known)
            view, again = relearned(view, moved, fresh)
            if again:
                more = yield AskOwners(again, view)
                if isinstance(more, IOFailure):
                    return failed(call, scope, more, frontier=known)
                heads = {**heads, **more}
    return decide(call, scope, view, heads, budget_spent=False, max_records=max_records)


def replan_flow(call: ToolCall, scope: tuple[str, ...], view: PlanView, verdict: Verdict) -> Flow:
    """Anything but a replan as it is. A replan's plan that supersedes another is blocked when
    the chain already spent its replan; else the replan gets the current records."""
    if verdict.verdict != REPLAN:
        return verdict
    known = {"frontier": verdict.frontier, "heads": verdict.heads}
    if view.plan is not None and view.plan.supersedes:
        spent = yield from budget_flow(view.plan.supersedes)
        if isinstance(spent, IOFailure):
            return failed(call, scope, spent, **known)
        if spent:
            return replan_spent(verdict)
    current_ids = tuple(s.current for s in verdict.stale if s.current)
    if not current_ids:
        return verdict
    got = yield LoadRecords(current_ids)
    if isinstance(got, IOFailure):
        return failed(call, scope, got, **known)
    records = {s.key: got[s.current] for s in verdict.stale if s.current and s.current in got}
    return verdict.evolve(current_records=records)


def budget_flow(plan_id: str) -> Generator[IORequest, Any, bool | IOFailure]:
    """Walk the `supersedes` chain from `plan_id`: spent if a plan was refused as stale before
    any gated allow (a plan that acted starts a new budget); a chain too long to walk is
    spent (fail closed)."""
    current: str | None = plan_id
    for _ in range(MAX_SUPERSEDES_CHAIN):
        if current is None:
            return False
        refused = yield Audited(current, BUDGET_REASONS)
        if isinstance(refused, IOFailure):
            return refused
        if refused:
            return True
        acted = yield Audited(current, (CURRENT,))
        if isinstance(acted, IOFailure):
            return acted
        if acted:
            return False
        got = yield LoadRecords((current,))
        if isinstance(got, IOFailure):
            return got
        if current not in got:
            return IOFailure(UNKNOWN_RECORD, f"plan {current} of the supersedes chain is unknown")
        current = got[current].supersedes
    return True


__all__ = [
    "ALLOW",
    "AUDIT_UNAVAILABLE",
    "BLOCK",
    "BLOCK_REASONS",
    "BUDGET_REASONS",
    "CURRENT",
    "HEAD_ROLLBACK",
    "INCOMPLETE_LINEAGE",
    "INTERNAL_ERROR",
    "LINEAGE_TOO_LARGE",
    "MAX_SUPERSEDES_CHAIN",
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
    "Audited",
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
    "ToolCall",
    "Verdict",
    "VerdictKind",
    "args_digest",
    "base_verdict",
    "budget_flow",
    "decide",
    "fail_closed",
    "failed",
    "frontier_of",
    "gate_flow",
    "judge_flow",
    "judge_heads",
    "lineage_problem",
    "owner_problem",
    "owners_of",
    "plan_problem",
    "relearned",
    "replan_flow",
    "replan_spent",
    "resolve_call",
    "stale_keys",
    "view_problem",
]
