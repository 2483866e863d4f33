"""The PlanFence decision, as pure logic.

`gate_flow` yields the reads it needs (`LoadPlan`, `AskOwners`, `LoadRecords`) and receives their
answers (or an `IOFailure`); it returns a `Verdict`. `Gate` drives it against a store and a head
source; tests drive it with plain dicts. Whatever cannot be proven current is blocked.

Valid(a)  <=>  for every x in D(a): F_a(x) == {H(x)}
"""

from __future__ import annotations

import hashlib
from collections.abc import Generator, Mapping
from dataclasses import dataclass, field, replace
from enum import Enum
from typing import Any, Literal

from planfence.shared_memory import (
    KIND_PLAN,
    Frontier,
    KeyState,
    Record,
    canonical_json,
    is_record_id,
)

from .policy import Policy
from .templates import ScopeError
from .values import value_digests

ALLOW: Literal["allow"] = "allow"
REPLAN: Literal["replan"] = "replan"
BLOCK: Literal["block"] = "block"
VerdictKind = Literal["allow", "replan", "block"]


class Reason(str, Enum):
    """The stable reason codes of a verdict. Members are strings: they compare, format and encode
    as their value ("current", "stale_dependencies", ...), in the audit log and on the wire."""

    CURRENT = "current"
    UNGATED = "ungated"
    STALE = "stale_dependencies"
    MISSING_PLAN = "missing_plan"
    UNKNOWN_PLAN = "unknown_plan"
    UNKNOWN_RECORD = "unknown_record"
    INCOMPLETE_LINEAGE = "incomplete_lineage"
    UNDECLARED_TOOL = "undeclared_tool"
    SCOPE_UNRESOLVED = "scope_unresolved"
    OWNER_UNREACHABLE = "owner_unreachable"
    OWNER_UNAUTHENTICATED = "owner_unauthenticated"
    STALE_AFTER_REPLAN = "stale_after_replan"
    LINEAGE_TOO_LARGE = "lineage_too_large"
    STORE_UNAVAILABLE = "store_unavailable"
    AUDIT_UNAVAILABLE = "audit_unavailable"
    INTERNAL_ERROR = "internal_error"

    def __str__(self) -> str:
        return str.__str__(self)

    def __format__(self, spec: str) -> str:
        return str.__format__(str.__str__(self), spec)


# Module-level names for the codes, as the rest of the gate spells them.
CURRENT = Reason.CURRENT
UNGATED = Reason.UNGATED
STALE = Reason.STALE
MISSING_PLAN = Reason.MISSING_PLAN
UNKNOWN_PLAN = Reason.UNKNOWN_PLAN
UNKNOWN_RECORD = Reason.UNKNOWN_RECORD
INCOMPLETE_LINEAGE = Reason.INCOMPLETE_LINEAGE
UNDECLARED_TOOL = Reason.UNDECLARED_TOOL
SCOPE_UNRESOLVED = Reason.SCOPE_UNRESOLVED
OWNER_UNREACHABLE = Reason.OWNER_UNREACHABLE
OWNER_UNAUTHENTICATED = Reason.OWNER_UNAUTHENTICATED
STALE_AFTER_REPLAN = Reason.STALE_AFTER_REPLAN
LINEAGE_TOO_LARGE = Reason.LINEAGE_TOO_LARGE
STORE_UNAVAILABLE = Reason.STORE_UNAVAILABLE
AUDIT_UNAVAILABLE = Reason.AUDIT_UNAVAILABLE
INTERNAL_ERROR = Reason.INTERNAL_ERROR

BLOCK_REASONS = frozenset(
    {
        MISSING_PLAN,
        UNKNOWN_PLAN,
        UNKNOWN_RECORD,
        INCOMPLETE_LINEAGE,
        UNDECLARED_TOOL,
        SCOPE_UNRESOLVED,
        OWNER_UNREACHABLE,
        OWNER_UNAUTHENTICATED,
        STALE_AFTER_REPLAN,
        LINEAGE_TOO_LARGE,
        STORE_UNAVAILABLE,
        AUDIT_UNAVAILABLE,
        INTERNAL_ERROR,
    }
)


@dataclass(frozen=True)
class StaleKey:
    key: str
    used: tuple[str, ...]
    current: str | None

    def to_dict(self) -> dict[str, Any]:
        return {"key": self.key, "used": list(self.used), "current": self.current}


@dataclass(frozen=True)
class Verdict:
    """The gate's answer for one call. `replan` carries what changed and the fresh records."""

    verdict: VerdictKind
    reason: str
    tool: str
    plan: str | None
    agent: str | None = None
    message: str = ""
    scope: tuple[str, ...] = ()
    frontier: Mapping[str, tuple[str, ...]] = field(default_factory=dict)
    heads: Mapping[str, str | None] = field(default_factory=dict)
    stale: tuple[StaleKey, ...] = ()
    current_records: Mapping[str, Record] = field(default_factory=dict)
    args_digest: str = ""
    value_digests: Mapping[str, str] = field(default_factory=dict, repr=False)
    """Digests of the arguments' values, by argument path (for the audit and the scope lint)."""
    latency_ms: float = 0.0
    decision_id: int | None = None

    @property
    def allowed(self) -> bool:
        return self.verdict == ALLOW

    def to_dict(self) -> dict[str, Any]:
        return {
            "verdict": self.verdict,
            "reason": self.reason,
            "tool": self.tool,
            "plan": self.plan,
            "agent": self.agent,
            "message": self.message,
            "scope": list(self.scope),
            "frontier": {k: list(v) for k, v in self.frontier.items()},
            "heads": dict(self.heads),
            "stale": [s.to_dict() for s in self.stale],
            "current_records": {k: r.to_dict() for k, r in self.current_records.items()},
            "args_digest": self.args_digest,
            "latency_ms": self.latency_ms,
            "decision_id": self.decision_id,
        }


def fail_closed(tool: str, plan_id: Any, agent: str | None, exc: BaseException) -> Verdict:
    """The verdict for a check that could not run at all: block, saying why."""
    return Verdict(
        BLOCK,
        INTERNAL_ERROR,
        tool,
        plan_id if isinstance(plan_id, str) else None,
        agent,
        message=f"gate error: {type(exc).__name__}: {exc}",
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
class PlanView:
    plan: Record | None
    frontier: Frontier | None = None
    states: Mapping[str, KeyState] = field(default_factory=dict)
    superseded_refused_stale: bool = False


@dataclass(frozen=True)
class AskOwners:
    """Ask each owner for the heads of its keys (one request per owner)."""

    owners: Mapping[str, tuple[str, ...]]


@dataclass(frozen=True)
class HeadAnswer:
    head: str | None = None
    error: str | None = None  # OWNER_UNREACHABLE or OWNER_UNAUTHENTICATED
    detail: str = ""


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


@dataclass(frozen=True)
class CheckRequest:
    tool: str
    args: Mapping[str, Any]
    plan_id: Any
    agent: str | None = None
    replan_spent: bool = False  # the caller already used its one replan for this action


def args_digest(args: Mapping[str, Any]) -> str:
    try:
        text = canonical_json(dict(args))
    except Exception:
        text = repr(sorted(args.items(), key=lambda kv: str(kv[0])))
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def resolve_call(req: CheckRequest, policy: Policy, base: Verdict) -> Verdict | tuple[str, ...]:
    """The checks that need no reads, shared by the gate and the baselines: the tool's
    declaration, its scope D(a) for these arguments, and the plan reference's form. Returns the
    scope, or the verdict that ends the check (built from `base`)."""

    def block(reason: str, message: str, **kw: Any) -> Verdict:
        return replace(base, verdict=BLOCK, reason=reason, message=message, **kw)

    tool = policy.get(req.tool)
    if tool is None:
        return block(UNDECLARED_TOOL, f"tool {req.tool!r} has no dependency declaration")
    if tool.ungated:
        return replace(base, verdict=ALLOW, reason=UNGATED, message="tool is declared ungated")
    try:
        scope = tool.scope(req.args)
    except ScopeError as exc:
        return block(SCOPE_UNRESOLVED, str(exc))
    if not scope:  # a gated tool that depends on nothing cannot be proven current
        return block(UNDECLARED_TOOL, f"tool {req.tool!r} declares no dependencies")
    if req.plan_id is None or req.plan_id == "":
        return block(MISSING_PLAN, "the call carries no plan reference", scope=scope)
    if not is_record_id(req.plan_id):
        return block(
            UNKNOWN_PLAN, f"malformed plan reference {str(req.plan_id)[:80]!r}", scope=scope
        )
    return scope


def base_verdict(req: CheckRequest) -> Verdict:
    """The verdict a check starts from: block, until proven otherwise."""
    return Verdict(
        BLOCK,
        INTERNAL_ERROR,
        req.tool,
        req.plan_id if isinstance(req.plan_id, str) else None,
        req.agent,
        args_digest=args_digest(req.args),
        value_digests=value_digests(req.args),
    )


def decide(
    req: CheckRequest,
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
    base = replace(base_verdict(req), scope=scope)
    problem = plan_problem(req, view) or lineage_problem(view, scope, max_records)
    if problem is not None:
        return replace(base, **problem)
    assert view.frontier is not None and view.plan is not None
    frontier = frontier_of(view.frontier, scope)
    base = replace(base, frontier=frontier)
    problem = owner_problem(scope, view.states, heads)
    if problem is not None:
        return replace(base, **problem)
    current = {k: heads[k].head for k in scope}
    base = replace(base, heads=current)
    stale = stale_keys(frontier, current)
    if not stale:
        return replace(
            base, verdict=ALLOW, reason=CURRENT, message=f"{len(scope)} dependencies current"
        )
    changed = ", ".join(s.key for s in stale)
    if budget_spent or req.replan_spent or view.superseded_refused_stale:
        return replace(
            base,
            reason=STALE_AFTER_REPLAN,
            stale=stale,
            message=f"stale again after the one replan: {changed}",
        )
    return replace(
        base,
        verdict=REPLAN,
        reason=STALE,
        stale=stale,
        message=f"plan was derived from outdated versions of {changed}; replan once",
    )


Problem = dict[str, Any]  # the fields of a blocking verdict: reason, message (and what is known)


def _block(reason: str, message: str) -> Problem:
    return {"verdict": BLOCK, "reason": reason, "message": message}


def plan_problem(req: CheckRequest, view: PlanView) -> Problem | None:
    """The plan reference names no stored plan record."""
    if view.plan is None:
        return _block(UNKNOWN_PLAN, f"no plan {req.plan_id} in the store")
    if view.plan.kind != KIND_PLAN:
        return _block(UNKNOWN_PLAN, f"record {req.plan_id} is a {view.plan.kind!r}, not a plan")
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
        return _block(INCOMPLETE_LINEAGE, "lineage contains a parent cycle")
    if fr.truncated:
        return _block(LINEAGE_TOO_LARGE, f"lineage walk exceeded {max_records} records")
    unused = [k for k in scope if not fr.used(k)]
    if unused:
        return {
            **_block(INCOMPLETE_LINEAGE, "the plan's lineage never reaches " + ", ".join(unused)),
            "frontier": frontier_of(fr, scope),
        }
    return None


def owner_problem(
    scope: tuple[str, ...], states: Mapping[str, KeyState], heads: Mapping[str, HeadAnswer]
) -> Problem | None:
    """A key without an owner, or an owner that did not answer for its key with a head."""
    unowned = [k for k in scope if k not in states]
    if unowned:
        return _block(UNKNOWN_RECORD, "no owner for " + ", ".join(unowned))
    for k in scope:
        owner = states[k].owner
        ans = heads.get(k)
        if ans is None:
            return _block(OWNER_UNREACHABLE, f"owner {owner!r} gave no head for {k}")
        if ans.error is not None:
            reason = ans.error if ans.error in BLOCK_REASONS else OWNER_UNREACHABLE
            return _block(reason, f"owner {owner!r} of {k}: {ans.detail or ans.error}")
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


def owners_of(scope: tuple[str, ...], states: Mapping[str, KeyState]) -> dict[str, tuple[str, ...]]:
    """One request per owner, for the keys of D(a) it owns."""
    owners: dict[str, list[str]] = {}
    for k in scope:
        if k in states:
            owners.setdefault(states[k].owner, []).append(k)
    return {o: tuple(ks) for o, ks in sorted(owners.items())}


def gate_flow(req: CheckRequest, policy: Policy, *, max_records: int = 10_000) -> Flow:
    """Load what `decide` needs (yielding each read), decide, and hand a replan its records."""
    pre = resolve_call(req, policy, base_verdict(req))
    if isinstance(pre, Verdict):
        return pre
    scope = pre

    def failed(io: IOFailure, **known: Any) -> Verdict:
        return replace(base_verdict(req), reason=io.reason, message=io.detail, scope=scope, **known)

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
