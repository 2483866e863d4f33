"""The gate shell: drives `gate_flow` against a store and a head source, audits every decision,
and runs tools with the one-replan loop. Async first; `SyncGate` is the sync twin.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, replace
from typing import Any, Protocol, TypeVar

from planfence.shared_memory import (
    AsyncStore,
    Decision,
    IntegrityError,
    PlanFenceError,
    Store,
    StoreError,
)

from .decision import (
    ALLOW,
    AUDIT_UNAVAILABLE,
    BLOCK,
    INTERNAL_ERROR,
    REPLAN,
    STALE,
    STORE_UNAVAILABLE,
    UNKNOWN_RECORD,
    AskOwners,
    CheckRequest,
    IOFailure,
    IORequest,
    LoadPlan,
    LoadRecords,
    PlanView,
    Verdict,
    gate_flow,
)
from .heads import HeadSource
from .policy import Policy

T = TypeVar("T")
AUDIT_SOURCE = "gate"


@dataclass(frozen=True)
class Replanned:
    """What a replan callback returns: the new plan and the arguments it authorises."""

    plan_id: str
    args: Mapping[str, Any]


ReplanFn = Callable[[Verdict], Awaitable[Replanned | None]]
CallFn = Callable[[Mapping[str, Any]], Awaitable[Any]]


@dataclass(frozen=True)
class Outcome:
    """What happened to one guarded action."""

    tool: str
    executed: bool
    args: Mapping[str, Any]
    plan_id: str | None
    verdicts: tuple[Verdict, ...]
    result: Any = None

    @property
    def final(self) -> Verdict:
        return self.verdicts[-1]

    @property
    def replans(self) -> int:
        return sum(1 for v in self.verdicts if v.verdict == REPLAN)

    @property
    def blocked(self) -> bool:
        return self.final.verdict == BLOCK


class Checker(Protocol):
    """Anything that can judge one call: the gate, or a baseline executor."""

    name: str

    async def check(
        self,
        tool: str,
        args: Mapping[str, Any],
        plan_id: Any,
        *,
        agent: str | None = None,
        replan_spent: bool = False,
    ) -> Verdict: ...


class GuardedExecutor:
    """The executor loop shared by the gate and the baselines: check; if told to replan, call the
    replan callback once with the fresh records; check the new plan; run or refuse."""

    name = "executor"

    async def check(
        self,
        tool: str,
        args: Mapping[str, Any],
        plan_id: Any,
        *,
        agent: str | None = None,
        replan_spent: bool = False,
    ) -> Verdict:
        raise NotImplementedError

    async def run(
        self,
        tool: str,
        args: Mapping[str, Any],
        plan_id: str | None,
        call: CallFn,
        replan: ReplanFn | None = None,
        *,
        agent: str | None = None,
    ) -> Outcome:
        verdicts = [await self.check(tool, args, plan_id, agent=agent)]
        if verdicts[-1].verdict == REPLAN and replan is not None:
            fresh = await replan(verdicts[-1])
            if fresh is not None:
                args, plan_id = fresh.args, fresh.plan_id
                verdicts.append(
                    await self.check(tool, args, plan_id, agent=agent, replan_spent=True)
                )
        final = verdicts[-1]
        if final.verdict != ALLOW:
            return Outcome(tool, False, args, plan_id, tuple(verdicts))
        result = await call(args)
        return Outcome(tool, True, args, plan_id, tuple(verdicts), result)


class Gate(GuardedExecutor):
    """PlanFence: allow only calls whose plan frontier equals the owners' heads.

    Args:
        store: where plans, records and the audit log live.
        policy: the declared scopes D(a) per tool.
        heads: where heads come from; default the store itself (its owners' authoritative table).
        max_records: bound on a lineage walk (over it: `lineage_too_large`).
        audit: write every decision to the store's decision log (an allow whose audit write fails
            becomes a block).
    """

    name = "planfence"

    def __init__(
        self,
        store: AsyncStore,
        policy: Policy,
        *,
        heads: HeadSource | None = None,
        max_records: int = 10_000,
        audit: bool = True,
        agent: str | None = None,
    ) -> None:
        self.store = store
        self.policy = policy
        self.head_source = heads
        self.max_records = max_records
        self.audit = audit
        self.agent = agent

    async def check(
        self,
        tool: str,
        args: Mapping[str, Any],
        plan_id: Any,
        *,
        agent: str | None = None,
        replan_spent: bool = False,
    ) -> Verdict:
        """Judge one call just before it runs; never raises for bad input, blocks instead."""
        start = time.perf_counter()
        req = CheckRequest(tool, args, plan_id, agent or self.agent, replan_spent)
        try:
            verdict = await self._drive(req)
        except Exception as exc:  # fail closed on anything unexpected
            verdict = Verdict(
                BLOCK,
                INTERNAL_ERROR,
                tool,
                plan_id if isinstance(plan_id, str) else None,
                req.agent,
                message=f"gate error: {type(exc).__name__}: {exc}",
            )
        verdict = replace(verdict, latency_ms=round((time.perf_counter() - start) * 1000, 4))
        if self.audit:
            try:
                verdict = replace(verdict, decision_id=await self._record(verdict))
            except Exception as exc:
                if verdict.verdict == ALLOW:
                    verdict = replace(
                        verdict,
                        verdict=BLOCK,
                        reason=AUDIT_UNAVAILABLE,
                        message=f"decision could not be recorded: {exc}",
                    )
        return verdict

    async def _drive(self, req: CheckRequest) -> Verdict:
        flow = gate_flow(
            req,
            self.policy,
            heads_from_store=self.head_source is None,
            max_records=self.max_records,
        )
        try:
            request = next(flow)
            while True:
                request = flow.send(await self._serve(request))
        except StopIteration as stop:
            verdict: Verdict = stop.value
            return verdict

    async def _serve(self, request: IORequest) -> Any:
        try:
            if isinstance(request, LoadPlan):
                return await self._load_plan(request)
            if isinstance(request, AskOwners):
                assert self.head_source is not None
                return await self.head_source.heads(request.owners)
            if isinstance(request, LoadRecords):
                return await self.store.get_many(request.ids)
        except IntegrityError as exc:
            return IOFailure(UNKNOWN_RECORD, f"record fails its integrity check: {exc}")
        except StoreError as exc:
            return IOFailure(STORE_UNAVAILABLE, f"store: {exc}")
        except PlanFenceError as exc:
            return IOFailure(INTERNAL_ERROR, str(exc))
        return IOFailure(INTERNAL_ERROR, f"unknown read {type(request).__name__}")

    async def _load_plan(self, request: LoadPlan) -> PlanView:
        snap = await self.store.snapshot(
            request.plan_id, request.scope, max_records=request.max_records
        )
        if snap.root is None:
            return PlanView(None)
        refused = False
        if snap.root.supersedes:
            refused = bool(
                await self.store.decisions(
                    source=AUDIT_SOURCE, plan=snap.root.supersedes, verdict=REPLAN, limit=1
                )
            )
        return PlanView(snap.root, snap.frontier, snap.states, refused)

    async def _record(self, v: Verdict) -> int:
        payload = {
            "args_digest": v.args_digest,
            "scope": list(v.scope),
            "frontier": {k: list(ids) for k, ids in v.frontier.items()},
            "heads": dict(v.heads),
            "stale": [s.to_dict() for s in v.stale],
            "message": v.message,
            "latency_ms": v.latency_ms,
            "executor": self.name,
        }
        decision = Decision(
            source=AUDIT_SOURCE,
            verdict=v.verdict,
            reason=v.reason,
            agent=v.agent,
            tool=v.tool,
            plan=v.plan,
            payload=payload,
        )
        return await self.store.log(decision)

    async def aclose(self) -> None:
        if self.head_source is not None:
            await self.head_source.aclose()


class SyncGate:
    """Synchronous twin of `Gate`, over a sync `Store` (runs on the store's loop thread)."""

    def __init__(self, store: Store, policy: Policy, **kwargs: Any) -> None:
        self.store = store
        self.gate = Gate(store.aio, policy, **kwargs)

    def check(
        self,
        tool: str,
        args: Mapping[str, Any],
        plan_id: Any,
        *,
        agent: str | None = None,
        replan_spent: bool = False,
    ) -> Verdict:
        return self.store._run(
            self.gate.check(tool, args, plan_id, agent=agent, replan_spent=replan_spent)
        )

    def run(
        self,
        tool: str,
        args: Mapping[str, Any],
        plan_id: str | None,
        call: Callable[[Mapping[str, Any]], Any],
        replan: Callable[[Verdict], Replanned | None] | None = None,
        *,
        agent: str | None = None,
    ) -> Outcome:
        """Same loop as `Gate.run`, with plain callables; the tool runs on the caller's thread."""
        verdicts = [self.check(tool, args, plan_id, agent=agent)]
        if verdicts[-1].verdict == REPLAN and replan is not None:
            fresh = replan(verdicts[-1])
            if fresh is not None:
                args, plan_id = fresh.args, fresh.plan_id
                verdicts.append(self.check(tool, args, plan_id, agent=agent, replan_spent=True))
        if verdicts[-1].verdict != ALLOW:
            return Outcome(tool, False, args, plan_id, tuple(verdicts))
        return Outcome(tool, True, args, plan_id, tuple(verdicts), call(args))


__all__ = [
    "STALE",
    "CallFn",
    "Checker",
    "Gate",
    "GuardedExecutor",
    "Outcome",
    "ReplanFn",
    "Replanned",
    "SyncGate",
]
