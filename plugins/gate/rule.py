"""The PlanFence rule, pure: what a call may do, given what was read for it.

Valid(a)  <=>  for every x in D(a): F_a(x) == {H(x)}

`decide` judges a loaded `PlanView` against the owners' heads, once per check: it neither reads,
writes nor looks at a clock. Whatever cannot be proven current is blocked. (The checks that need
no reads, the tool's declaration and scope, are the flow's first step: `decision.resolve_call`.)
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from planfence.shared_memory import KeyState, Record
from planfence.shared_memory.lineage import Frontier
from planfence.shared_memory.records import KIND_PLAN

from .call import ToolCall
from .verdicts import (
    ALLOW,
    BLOCK,
    BLOCK_REASONS,
    CURRENT,
    INCOMPLETE_LINEAGE,
    INTERNAL_ERROR,
    LINEAGE_TOO_LARGE,
    OWNER_EPOCH_STALE,
    OWNER_UNREACHABLE,
    REPLAN,
    STALE,
    STALE_AFTER_REPLAN,
    UNKNOWN_PLAN,
    UNKNOWN_RECORD,
    StaleKey,
    Verdict,
)

# Said in every refusal that a dry run explains: the keys a call resolves to, and the versions.
CHECK_HINT = (
    "`planfence check TOOL --args JSON --policy FILE --plan ID` shows the keys this call "
    "depends on and the versions the plan used"
)


@dataclass(frozen=True)
class PlanView:
    """What was read for a check: the plan record, its frontier over D(a), the owners/heads of
    D(a), and whether the plan it supersedes was refused as stale."""

    plan: Record | None
    frontier: Frontier | None = None
    states: Mapping[str, KeyState] = field(default_factory=dict)
    superseded_refused_stale: bool = False


@dataclass(frozen=True)
class HeadAnswer:
    """An owner's word on one key: its head, and the owner epoch it speaks for (None: a source
    that reads the owners' table itself, in the same snapshot), or why there is none."""

    head: str | None = None
    error: str | None = None  # a block reason: OWNER_UNREACHABLE, OWNER_UNAUTHENTICATED, ...
    detail: str = ""
    epoch: int | None = None
    fenced: bool = False
    """The answer is an ex-owner's, for an epoch its key has left (computed before a takeover,
    delivered after it): evidence of nothing. The check blocks (`owner_epoch_stale`) instead of
    asking the new owner; the next call starts clean."""

    def moved_on(self, state: KeyState) -> bool:
        """The answer says the key changed owner since `state` was read: the owner asked no
        longer holds it, or holds it in a later epoch (never a fenced ex-owner's answer)."""
        if self.fenced:
            return False
        if self.error == OWNER_EPOCH_STALE:
            return True
        return self.error is None and self.epoch is not None and self.epoch > state.epoch


def base_verdict(call: ToolCall) -> Verdict:
    """The verdict a check starts from: block, until proven otherwise."""
    return call.verdict(BLOCK, INTERNAL_ERROR)


def decide(
    call: ToolCall,
    scope: tuple[str, ...],
    view: PlanView,
    heads: Mapping[str, HeadAnswer],
    *,
    budget_spent: bool,
    max_records: int,
) -> Verdict:
    """The PlanFence rule on data already loaded: allow iff, for every x in D(a), F_a(x) == {H(x)}.

    Everything that cannot be proven current blocks; a stale plan gets one replan unless the
    budget along its `supersedes` chain is spent. Pure: no reads, no clock.
    """
    problem = view_problem(call, view, scope, max_records)
    if problem is not None:
        return call.verdict(scope=scope, **problem)
    return judge_heads(call, scope, view, heads, budget_spent=budget_spent)


def judge_heads(
    call: ToolCall,
    scope: tuple[str, ...],
    view: PlanView,
    heads: Mapping[str, HeadAnswer],
    *,
    budget_spent: bool,
) -> Verdict:
    """The rule for a view without problems (`view_problem` found none): the owners' answers
    against the plan's frontier."""
    assert view.frontier is not None
    frontier = frontier_of(view.frontier, scope)
    problem = owner_problem(scope, view.states, heads)
    if problem is not None:
        return call.verdict(scope=scope, frontier=frontier, **problem)
    current = {k: heads[k].head for k in scope}
    stale = stale_keys(frontier, current)
    epochs = {k: view.states[k].epoch for k in scope}
    known: dict[str, Any] = {
        "scope": scope,
        "frontier": frontier,
        "heads": current,
        "epochs": epochs,
        "stale": stale,
    }
    if not stale:
        return call.verdict(ALLOW, CURRENT, f"{len(scope)} dependencies current", **known)
    if budget_spent or call.replan_spent or view.superseded_refused_stale:
        return call.verdict(BLOCK, STALE_AFTER_REPLAN, _stale_again(stale), **known)
    changed = ", ".join(s.key for s in stale)
    message = f"plan was derived from outdated versions of {changed}; replan once"
    return call.verdict(REPLAN, STALE, message, **known)


def replan_spent(verdict: Verdict) -> Verdict:
    """A replan verdict whose plan's `supersedes` chain turns out to have spent the one replan:
    blocked, as `judge_heads` blocks it when the budget is known spent."""
    return verdict.evolve(
        verdict=BLOCK, reason=STALE_AFTER_REPLAN, message=_stale_again(verdict.stale)
    )


def _stale_again(stale: tuple[StaleKey, ...]) -> str:
    return "stale again after the one replan: " + ", ".join(s.key for s in stale)


Problem = dict[str, Any]  # the fields of a blocking verdict: reason, message (and what is known)


def _block(reason: str, message: str) -> Problem:
    return {"verdict": BLOCK, "reason": reason, "message": message}


def view_problem(
    call: ToolCall, view: PlanView, scope: tuple[str, ...], max_records: int
) -> Problem | None:
    """What in the loaded view blocks before any owner is asked: the plan, or its lineage."""
    return plan_problem(call, view) or lineage_problem(view, scope, max_records)


def plan_problem(call: ToolCall, view: PlanView) -> Problem | None:
    """The plan reference names no stored plan record."""
    if view.plan is None:
        return _block(UNKNOWN_PLAN, f"no plan {call.plan} in the store")
    if view.plan.kind != KIND_PLAN:
        return _block(UNKNOWN_PLAN, f"record {call.plan} is a {view.plan.kind!r}, not a plan")
    return None


def lineage_problem(view: PlanView, scope: tuple[str, ...], max_records: int) -> Problem | None:
    """The walk from the plan cannot give one version per key: unknown ids, a cycle, the bound,
    or a key in D(a) the plan never reached."""
    fr = view.frontier
    if fr is None:
        return _block(INTERNAL_ERROR, "no frontier was computed")
    if fr.unknown:
        return {
            **_block(
                UNKNOWN_RECORD,
                f"lineage cites {len(fr.unknown)} record(s) the store does not hold: "
                + ", ".join(sorted(fr.unknown)[:3]),
            ),
            "frontier": frontier_of(fr, scope),
        }
    if fr.cycle:
        return _block(INCOMPLETE_LINEAGE, f"lineage contains a parent cycle ({CHECK_HINT})")
    if fr.truncated:
        return _block(LINEAGE_TOO_LARGE, f"lineage walk exceeded {max_records} records")
    unused = [k for k in scope if not fr.used(k)]
    if unused:
        return {
            **_block(
                INCOMPLETE_LINEAGE,
                f"the plan's lineage never reaches {', '.join(unused)} ({CHECK_HINT})",
            ),
            "frontier": frontier_of(fr, scope),
        }
    return None


def owner_problem(
    scope: tuple[str, ...], states: Mapping[str, KeyState], heads: Mapping[str, HeadAnswer]
) -> Problem | None:
    """A key without an owner, an owner that did not answer for its key with a head, or an answer
    for another owner epoch than the key's (an ex-owner's word, or a view of owners that moved)."""
    unowned = [k for k in scope if k not in states]
    if unowned:
        return _block(UNKNOWN_RECORD, "no owner for " + ", ".join(unowned))
    for k in scope:
        owner, epoch = states[k].owner, states[k].epoch
        ans = heads.get(k)
        if ans is None:
            return _block(OWNER_UNREACHABLE, f"owner {owner!r} gave no head for {k}")
        if ans.error is not None:
            reason = ans.error if ans.error in BLOCK_REASONS else OWNER_UNREACHABLE
            return _block(reason, f"owner {owner!r} of {k}: {ans.detail or ans.error}")
        if ans.epoch is not None and ans.epoch != epoch:
            return _block(
                OWNER_EPOCH_STALE,
                f"{owner!r} answered for {k} in owner epoch {ans.epoch}; the key is in epoch "
                f"{epoch}",
            )
    return None


def frontier_of(fr: Frontier, scope: tuple[str, ...]) -> dict[str, tuple[str, ...]]:
    return {k: tuple(sorted(fr.used(k))) for k in scope}


def stale_keys(
    frontier: Mapping[str, tuple[str, ...]], heads: Mapping[str, str | None]
) -> tuple[StaleKey, ...]:
    """The keys whose versions the plan used are not exactly the current head."""
    return tuple(
        StaleKey(k, used, heads[k]) for k, used in frontier.items() if set(used) != {heads[k]}
    )
