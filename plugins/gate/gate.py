"""The gate shell: drives `gate_flow` against a store and a head source, audits every decision,
and runs tools with the one-replan loop. Async first; `SyncGate` is the sync twin.
"""

from __future__ import annotations

import time
from collections.abc import Collection, Mapping
from dataclasses import replace
from typing import Any, Literal, TypeVar

from planfence.plugins.telemetry import gate_span
from planfence.shared_memory import (
    AsyncStore,
    HeadVerifier,
    IntegrityError,
    PlanFenceError,
    StoreError,
)

from .audit import AUDIT_SOURCE, Decision
from .audit_writer import DeferredAudit
from .decision import (
    ALLOW,
    AUDIT_UNAVAILABLE,
    BLOCK,
    CURRENT,
    INTERNAL_ERROR,
    STALE,
    STALE_AFTER_REPLAN,
    STORE_UNAVAILABLE,
    UNKNOWN_RECORD,
    AskOwners,
    CheckBudget,
    CheckRequest,
    Flow,
    IOFailure,
    IORequest,
    LoadPlan,
    LoadRecords,
    PlanView,
    ReloadOwners,
    Verdict,
    fail_closed,
    gate_flow,
)
from .executor import (
    CallFn,
    Checker,
    GuardedExecutor,
    Outcome,
    ReplanFn,
    Replanned,
)
from .heads import HeadSource
from .policy import Policy
from .snapshot import Flag, PlanSnapshot, frontier_memo, snapshot, snapshot_and_log
from .store_heads import ProveOwners, heads_or_proof, proven_heads, untrusted_store
from .wire import DecisionDetail

T = TypeVar("T")
AuditMode = bool | Literal["deferred"]
BUDGET_REASONS = (STALE, STALE_AFTER_REPLAN)
MAX_SUPERSEDES_CHAIN = 64
# A plan superseding a plan that the gate refused as stale gets no second replan.
REFUSED_AS_STALE = Flag(AUDIT_SOURCE, BUDGET_REASONS)


class Gate(GuardedExecutor):
    """PlanFence: allow only calls whose plan frontier equals the owners' heads.

    Args:
        store: where plans, records and the audit log live.
        policy: the declared scopes D(a) per tool.
        heads: where heads come from; default the store itself (its owners' authoritative table).
        max_records: bound on a lineage walk (over it: `lineage_too_large`).
        audit: write every decision to the store's audit journal before answering (an allow
            whose record cannot be written becomes a block). `"deferred"`: refusals as before,
            allows queued and written in batches just after (see `audit_writer`); `False`: only
            the stale refusals the replan budget needs.
        verify_heads: the owners' public keys (a `PublicKeyring`), for a store this gate does
            not trust: every head read from it must carry its owner's signature for the key's
            current epoch, and never go back (`SignedHeads`); and the owner must be proven by
            signed ownership claims from `owner_assigners` (`owner_chain`). Else it blocks.
        owner_assigners: the agents trusted to assign keys their first owner (required with
            `verify_heads`).
    """

    name = "planfence"

    def __init__(
        self,
        store: AsyncStore,
        policy: Policy,
        *,
        heads: HeadSource | None = None,
        max_records: int = 10_000,
        audit: AuditMode = True,
        agent: str | None = None,
        verify_heads: HeadVerifier | None = None,
        owner_assigners: Collection[str] | None = None,
    ) -> None:
        if audit not in (True, False, "deferred"):
            raise ValueError(f"audit must be True, False or 'deferred', not {audit!r}")
        self.store = store
        self.signed_heads = untrusted_store(verify_heads, owner_assigners)
        self.policy = policy
        self.head_source = heads
        self.max_records = max_records
        self.audit = bool(audit)
        self.deferred = DeferredAudit(store) if audit == "deferred" else None
        self.agent = agent
        # Records are immutable: the frontiers of lineages already walked are remembered (per
        # store), so checking a plan costs one row per parent whatever the lineage's depth.
        self.frontier_memo = frontier_memo(store)

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
        with gate_span(tool, agent or self.agent) as traced:
            verdict = await self._check(tool, args, plan_id, agent, replan_spent, start)
            traced.gate(verdict, time.perf_counter() - start)
        return verdict

    async def _check(
        self,
        tool: str,
        args: Mapping[str, Any],
        plan_id: Any,
        agent: str | None,
        replan_spent: bool,
        start: float,
    ) -> Verdict:
        req = CheckRequest(tool, args, plan_id, agent or self.agent, replan_spent)
        decision_id: int | None = None
        try:
            verdict, decision_id = await self._drive(req, start)
        except Exception as exc:  # fail closed on anything unexpected
            verdict = self._stamp(fail_closed(tool, plan_id, req.agent, exc), start)
        if self.deferred is not None and verdict.verdict == ALLOW:
            try:
                self.deferred.append(self._decision(verdict))
            except Exception as exc:
                return self._audit_failed(verdict, exc)
            return verdict
        # Refusals for staleness are what the one-replan budget is made of: they are recorded even
        # with audit off, so the budget holds across gates and processes.
        if decision_id is None and (self.audit or verdict.reason in BUDGET_REASONS):
            try:
                decision_id = await self.store.log(self._decision(verdict))
            except Exception as exc:
                return self._audit_failed(verdict, exc)
        return verdict if decision_id is None else verdict.evolve(decision_id=decision_id)

    async def preview(
        self, tool: str, args: Mapping[str, Any], plan_id: Any, *, agent: str | None = None
    ) -> Verdict:
        """The verdict `check` would give now, from the same flow and reads, writing nothing: no
        audit entry, so no replan budget spent either (a dry run, as `planfence check` makes)."""
        req = CheckRequest(tool, args, plan_id, agent or self.agent)
        start = time.perf_counter()
        try:
            verdict, _ = await self._drive(req, start, write=False)
        except Exception as exc:
            verdict = self._stamp(fail_closed(tool, plan_id, req.agent, exc), start)
        return verdict

    @staticmethod
    def _stamp(verdict: Verdict, start: float) -> Verdict:
        return verdict.evolve(latency_ms=round((time.perf_counter() - start) * 1000, 4))

    @staticmethod
    def _audit_failed(verdict: Verdict, exc: Exception) -> Verdict:
        if verdict.verdict == BLOCK:
            return verdict  # a block stands even when it could not be recorded
        # An allow must be on record before the call runs; an unrecorded replan verdict would
        # let the next plan claim a fresh replan budget.
        return replace(
            verdict,
            verdict=BLOCK,
            reason=AUDIT_UNAVAILABLE,
            message=f"decision could not be recorded: {exc}",
        )

    async def _drive(
        self, req: CheckRequest, start: float, *, write: bool = True
    ) -> tuple[Verdict, int | None]:
        """Run the flow; with audit on, the plan read, the decision and its audit record share
        one store transaction whenever the decision needs no other I/O (the common case).
        `write=False`: reads only (`preview`)."""
        flow = gate_flow(req, self.policy, max_records=self.max_records)
        try:
            request: IORequest | ProveOwners = next(flow)
            if write and isinstance(request, LoadPlan) and self.audit and self.deferred is None:
                done = await self._decide_in_snapshot(flow, request, start)
                if isinstance(done, tuple):
                    return done
                request = done
            while True:
                answer = await self._serve(request)
                if isinstance(answer, PlanView):
                    request = self._advance(flow, answer)
                else:
                    request = flow.send(answer)
        except StopIteration as stop:
            return self._stamp(stop.value, start), None

    def _advance(self, flow: Flow, view: PlanView) -> IORequest | ProveOwners:
        """Send the loaded view; with the store as the head source, its heads come from the same
        snapshot (no second read), so the owners' question is answered on the spot (unless
        owners need proving from the feed first)."""
        request = flow.send(view)
        if isinstance(request, AskOwners) and self.head_source is None:
            answer = heads_or_proof(view, request, self.signed_heads)
            if isinstance(answer, ProveOwners):
                return answer
            request = flow.send(answer)
        return request

    async def _decide_in_snapshot(
        self, flow: Flow, request: LoadPlan, start: float
    ) -> tuple[Verdict, int | None] | IORequest | ProveOwners:
        outcome: dict[str, Any] = {}

        def decide(snap: PlanSnapshot) -> Decision | None:
            try:
                outcome["next"] = self._advance(flow, self._view(snap))
                return None
            except StopIteration as stop:
                outcome["verdict"] = self._stamp(stop.value, start)
                return self._decision(outcome["verdict"])

        try:
            _, decision_id = await snapshot_and_log(
                self.store,
                request.plan_id,
                request.scope,
                decide,
                max_records=request.max_records,
                flag=REFUSED_AS_STALE,
                memo=self.frontier_memo,
                # Heads from the store, taken on trust: decided as soon as the snapshot is read.
                short_ok=self.head_source is None and self.signed_heads is None,
            )
        except Exception as exc:
            if "verdict" in outcome:  # decided, but the audit record did not commit
                return self._audit_failed(outcome["verdict"], exc), None
            if "next" in outcome:
                return outcome["next"]  # type: ignore[no-any-return]
            failure = _read_failure(exc)
            if failure is None:
                raise
            try:
                return flow.send(failure)
            except StopIteration as stop:  # must not escape a coroutine
                return self._stamp(stop.value, start), None
        if "verdict" in outcome:
            return outcome["verdict"], decision_id
        return outcome["next"]  # type: ignore[no-any-return]

    async def _serve(self, request: IORequest | ProveOwners) -> Any:
        try:
            if isinstance(request, LoadPlan):
                snap = await snapshot(
                    self.store,
                    request.plan_id,
                    request.scope,
                    max_records=request.max_records,
                    flag=REFUSED_AS_STALE,
                    memo=self.frontier_memo,
                )
                return self._view(snap)
            if isinstance(request, ProveOwners):
                assert self.signed_heads is not None
                return await proven_heads(self.store, request, self.signed_heads)
            if isinstance(request, AskOwners):
                assert self.head_source is not None  # else answered from the view (_advance)
                return await self.head_source.heads(request.owners)
            if isinstance(request, ReloadOwners):
                return await self.store.states(request.keys)
            if isinstance(request, LoadRecords):
                return await self.store.get_many(request.ids)
            if isinstance(request, CheckBudget):
                return await self._budget_spent(request.plan_id)
        except PlanFenceError as exc:
            failure = _read_failure(exc)
            assert failure is not None
            return failure
        return IOFailure(INTERNAL_ERROR, f"unknown read {type(request).__name__}")

    async def _budget_spent(self, plan_id: str) -> bool:
        """Walk the `supersedes` chain: spent if a plan was refused as stale before any gated
        allow; a chain too long to walk is treated as spent (fail closed)."""
        current: str | None = plan_id
        for _ in range(MAX_SUPERSEDES_CHAIN):
            if current is None:
                return False
            if await self._audited(current, BUDGET_REASONS):
                return True
            if await self._audited(current, (CURRENT,)):
                return False  # that plan acted: a new refusal starts a new budget
            current = (await self.store.get(current)).supersedes
        return True

    async def _audited(self, plan_id: str, reasons: tuple[str, ...]) -> bool:
        """Whether the journal (or this gate's deferred queue) holds a gate decision about
        `plan_id` with one of `reasons`."""
        if self.deferred is not None and self.deferred.holds(plan_id, reasons):
            return True
        labels = {"reason": reasons}
        found = await self.store.journal(kind=AUDIT_SOURCE, subject=plan_id, labels=labels, limit=1)
        return bool(found)

    @staticmethod
    def _view(snap: PlanSnapshot) -> PlanView:
        if snap.root is None:
            return PlanView(None)
        return PlanView(snap.root, snap.frontier, snap.states, snap.superseded_flagged)

    def _decision(self, v: Verdict) -> Decision:
        return Decision(
            source=AUDIT_SOURCE,
            verdict=v.verdict,
            reason=v.reason,
            agent=v.agent,
            tool=v.tool,
            plan=v.plan,
            payload=DecisionDetail.of(v, self.name).wire(),
        )

    async def aclose(self) -> None:
        """Write the deferred audit's queue (if any) and close the head source."""
        try:
            if self.deferred is not None:
                await self.deferred.aclose()
        finally:
            if self.head_source is not None:
                await self.head_source.aclose()


def _read_failure(exc: BaseException) -> IOFailure | None:
    """Map a store error to the block it causes; None for errors that are not the store's."""
    if isinstance(exc, IntegrityError):
        return IOFailure(UNKNOWN_RECORD, f"record fails its integrity check: {exc}")
    if isinstance(exc, StoreError):
        return IOFailure(STORE_UNAVAILABLE, f"store: {exc}")
    if isinstance(exc, PlanFenceError):
        return IOFailure(INTERNAL_ERROR, str(exc))
    return None


__all__ = [
    "AUDIT_SOURCE",
    "STALE",
    "AuditMode",
    "CallFn",
    "Checker",
    "Gate",
    "GuardedExecutor",
    "Outcome",
    "ReplanFn",
    "Replanned",
]
