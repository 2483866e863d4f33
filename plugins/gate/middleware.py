"""One interception seam for every tool-call path: middleware around the gate.

An adapter translates its framework's tool call into a frozen `ToolCall` and asks the middleware
stack for a judgement, `Allowed` or `Refused`; it runs the tool only on `Allowed`, and shows a
`Refused` to the model in its framework's own form. Each middleware sees the call on the way in
and the judgement on the way out, as in FastMCP or Starlette:

    class Logged(Middleware):
        async def on_call_tool(self, call: ToolCall, call_next: CallNext) -> Allowed | Refused:
            outcome = await call_next(call)
            log.info("%s: %s", call.tool, outcome.verdict.reason)
            return outcome

    gate = GateMiddleware(store, policy, agent="executor", middleware=[Logged()])
    outcome = await gate.judge(ToolCall("book_flight", args, plan_id))

`GateMiddleware` is the innermost one: it owns the checker per store (the gate, unless an
experiment supplies another), fails closed (anything that goes wrong is a refusal, never an
allow), and reaches the store from sync or async code through the one `StoreBridge`. A step's
judgements fold into one outcome with `fold_step`, which also keeps the one-replan budget.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace
from functools import partial
from typing import Any, ClassVar, Protocol

from planfence.shared_memory import AsyncStore, PlanFenceError, Store, StoreBridge

from .audit import AUDIT_SOURCE, Decision
from .checkers import CheckerFactory, checker_factory, gate_checker
from .decision import ALLOW, BLOCK, CURRENT, REPLAN, UNGATED, Verdict, fail_closed
from .explain import explain
from .gate import AuditMode, Checker
from .policy import Policy

logger = logging.getLogger("planfence.gate")


@dataclass(frozen=True)
class ToolCall:
    """One tool call as the gate sees it.

    Args:
        tool: the tool's name.
        args: the arguments it would run with.
        plan: the plan record id the call acts under, as the caller sent it (None: no plan).
        agent: who calls, for the audit log (None: the middleware's own agent).
    """

    tool: str
    args: Mapping[str, Any]
    plan: Any = None
    agent: str | None = None


@dataclass(frozen=True)
class Allowed:
    """The call may run; `verdict` says why (a current plan, or an ungated tool)."""

    verdict: Verdict
    allowed: ClassVar[bool] = True


@dataclass(frozen=True)
class Refused:
    """The call must not run. `replan` says whether the caller may plan again once (the plan was
    stale) or is blocked; `message` is the refusal in words, for the model."""

    verdict: Verdict
    allowed: ClassVar[bool] = False

    @property
    def replan(self) -> bool:
        return self.verdict.verdict == REPLAN

    @property
    def reason(self) -> str:
        return str(self.verdict.reason)

    @property
    def stale_keys(self) -> tuple[str, ...]:
        return tuple(s.key for s in self.verdict.stale)

    @property
    def current(self) -> dict[str, str | None]:
        """Key -> the head the refusal showed, for every changed key."""
        return {s.key: s.current for s in self.verdict.stale}

    @property
    def message(self) -> str:
        return explain(self.verdict)


Judgement = Allowed | Refused


class CallNext(Protocol):
    def __call__(self, call: ToolCall) -> Awaitable[Judgement]: ...


class Middleware:
    """Base class: override `on_call_tool`; the default passes the call on unchanged."""

    async def on_call_tool(self, call: ToolCall, call_next: CallNext) -> Judgement:
        return await call_next(call)


async def _ungated(call: ToolCall) -> Judgement:
    plan = call.plan if isinstance(call.plan, str) else None
    return Allowed(Verdict(ALLOW, UNGATED, call.tool, plan, call.agent))


async def run_middleware(stack: Sequence[Middleware], call: ToolCall) -> Judgement:
    """Pass `call` through `stack`, outermost first; a call no middleware refuses is allowed."""
    handler: CallNext = _ungated
    for middleware in reversed(stack):
        handler = partial(middleware.on_call_tool, call_next=handler)
    return await handler(call)


class GateMiddleware(Middleware):
    """The gate as the innermost middleware of a stack.

    Args:
        store: an `AsyncStore`, a sync `Store`, a store URL, or a `StoreBridge` to one.
        policy: the declared scopes (a `Policy`, its dict form, or TOML text).
        checker: what judges calls: a checker factory `(store, policy, agent) -> checker` or its
            "module:name" path, or a ready checker (a `Gate`); default the gate.
        agent: who calls, when the call does not say.
        middleware: middleware around the gate, outermost first.
        audit: how the default gate records its decisions (`Gate`'s `audit`: True, before it
            answers; "deferred", allows in batches just after; False, refusals only).
    """

    def __init__(
        self,
        store: AsyncStore | Store | StoreBridge | str,
        policy: Policy | Mapping[str, Any] | str,
        *,
        checker: Checker | CheckerFactory | str | None = None,
        agent: str | None = None,
        middleware: Iterable[Middleware] = (),
        audit: AuditMode = True,
    ) -> None:
        self.bridge = store if isinstance(store, StoreBridge) else StoreBridge(store)
        self.policy = Policy.coerce(policy)
        self.agent = agent
        self.audit = audit
        self.fixed: Checker | None = None
        if checker is None or isinstance(checker, str) or callable(checker):
            self.factory = checker_factory(checker)
        else:
            self.fixed = checker
            self.factory = checker_factory(None)
        self.stack: tuple[Middleware, ...] = (*middleware, self)
        self._by_store: dict[int, tuple[AsyncStore, Checker]] = {}

    def checker_for(self, store: AsyncStore) -> Checker:
        """The checker for `store`, built once per store object."""
        if self.fixed is not None:
            return self.fixed
        hit = self._by_store.get(id(store))
        if hit is None or hit[0] is not store:
            if self.factory is gate_checker:
                made = gate_checker(store, self.policy, self.agent, audit=self.audit)
            else:
                made = self.factory(store, self.policy, self.agent)
            hit = self._by_store[id(store)] = (store, made)
        return hit[1]

    async def aclose(self) -> None:
        """Close the checkers this middleware built (a deferred audit writes its queue)."""
        built, self._by_store = list(self._by_store.values()), {}
        for _, checker in built:
            close = getattr(checker, "aclose", None)
            if close is not None:
                await close()

    async def on_call_tool(self, call: ToolCall, call_next: CallNext) -> Judgement:
        verdict = await self.verdict(call)
        if verdict.verdict != ALLOW:
            return Refused(verdict)
        after = await call_next(call)
        return Allowed(verdict) if after.allowed else after

    async def verdict(self, call: ToolCall) -> Verdict:
        """The checker's verdict on `call`; a check that cannot run blocks (fail closed)."""
        try:
            return await self.bridge.acall(self._check, call)
        except Exception as exc:
            return fail_closed(call.tool, call.plan, call.agent or self.agent, exc)

    async def _check(self, store: AsyncStore, call: ToolCall) -> Verdict:
        checker = self.checker_for(store)
        return await checker.check(call.tool, call.args, call.plan, agent=call.agent or self.agent)

    async def judge(self, call: ToolCall) -> Judgement:
        """Pass `call` through the whole stack, from async code."""
        try:
            return await run_middleware(self.stack, call)
        except Exception as exc:  # a middleware that fails must not let the call through
            return Refused(fail_closed(call.tool, call.plan, call.agent or self.agent, exc))

    def judge_sync(self, call: ToolCall) -> Judgement:
        """`judge` from sync code (on the store's portal)."""
        try:
            return self.bridge.run(self.judge, call)
        except Exception as exc:
            return Refused(fail_closed(call.tool, call.plan, call.agent or self.agent, exc))

    async def refuse(self, call: ToolCall, reason: str, message: str, *, by: str) -> Refused:
        """Refuse a call no checker could judge (its request was malformed), on the record
        when the store can take it; `by` names who refused, for the audit log."""
        plan = call.plan if isinstance(call.plan, str) else None
        verdict = Verdict(BLOCK, reason, call.tool, plan, message=message)
        decision = Decision(
            source=AUDIT_SOURCE,
            verdict=BLOCK,
            reason=reason,
            tool=call.tool,
            plan=plan,
            payload={"message": message, "executor": by},
        )
        try:
            verdict = replace(verdict, decision_id=await self.bridge.acall(_log, decision))
        except PlanFenceError:
            logger.warning("could not record the refusal of %s", call.tool, exc_info=True)
        return Refused(verdict)


async def _log(store: AsyncStore, decision: Decision) -> int:
    return await store.log(decision)


# ---- one step's judgements, and the one-replan budget

DONE, REPLANNING, BLOCKED = "done", "replan", "blocked"
REPLANS_PER_ACTION = 1


def summary(verdict: Verdict) -> dict[str, Any]:
    """The JSON-able part of a verdict that adapters keep (graph state, message metadata)."""
    return {
        "verdict": verdict.verdict,
        "reason": str(verdict.reason),
        "tool": verdict.tool,
        "plan": verdict.plan,
        "stale": [s.key for s in verdict.stale],
        "current": {s.key: s.current for s in verdict.stale},  # the heads the refusal showed
    }


def fold_step(
    summaries: Iterable[Mapping[str, Any]], replans_spent: int = 0
) -> dict[str, Any] | None:
    """One step's judgements as one outcome: blocked beats replan beats done.

    A refusal after the replans this action may spend blocks, whatever the checker said: the
    second refusal ends the run. `gated` says whether a gated call was allowed because its plan
    was current: only that ends an action (and its replan budget); ungated calls (a weather
    lookup) leave the budget where it was. None when the step made no call.
    """
    seen = list(summaries)
    gated = any(s["verdict"] == ALLOW and s.get("reason") == CURRENT for s in seen)
    for kind, status in ((BLOCK, BLOCKED), (REPLAN, REPLANNING), (ALLOW, DONE)):
        hit = next((s for s in seen if s["verdict"] == kind), None)
        if hit is not None:
            if status == REPLANNING and replans_spent >= REPLANS_PER_ACTION:
                status = BLOCKED
            fields = ("tool", "reason", "plan", "stale", "current")
            return {"status": status, "gated": gated, **{k: hit.get(k) for k in fields}}
    return None


def action_done(outcome: object) -> bool:
    """The step before ran its calls and one of them was gated and allowed as current: the
    action is over, and the next plan starts with a fresh replan budget."""
    if not isinstance(outcome, Mapping):
        return False
    return outcome.get("status") == DONE and bool(outcome.get("gated"))


__all__ = [
    "BLOCKED",
    "DONE",
    "REPLANNING",
    "Allowed",
    "CallNext",
    "GateMiddleware",
    "Judgement",
    "Middleware",
    "Refused",
    "ToolCall",
    "action_done",
    "fold_step",
    "run_middleware",
    "summary",
]
