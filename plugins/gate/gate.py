"""The gate shell: drives `gate_flow` against a store and a head source, audits every decision,
and runs tools with the one-replan loop. Async first; `SyncGate` is the sync twin.
"""

from __future__ import annotations

import time
from collections.abc import Collection, Mapping
from dataclasses import replace
from functools import partial
from typing import Any, TypeVar

from planfence.plugins.telemetry import gate_span
from planfence.shared_memory import (
    AsyncStore,
    HeadVerifier,
    IntegrityError,
    PlanFenceError,
    StoreError,
)

from .audit import AUDIT_SOURCE, Decision
from .audit_writer import DEFAULT_AUDIT, AuditMode, DeferredAudit, audit_mode
from .decision import (
    ALLOW,
    AUDIT_UNAVAILABLE,
    BLOCK,
    BUDGET_REASONS,
    INTERNAL_ERROR,
    REPLAN,
    STALE,
    STORE_UNAVAILABLE,
    UNKNOWN_RECORD,
    AskOwners,
    Audited,
    CheckRequest,
    HeadAnswer,
    IOFailure,
    IORequest,
    LoadPlan,
    LoadRecords,
    PlanView,
    ReloadOwners,
    Verdict,
    fail_closed,
    failed,
    gate_flow,
    replan_flow,
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
from .policy import Policy, ToolPolicy
from .repeats import Call, Repeats
from .snapshot import Flag, frontier_memo, snapshot, snapshot_and_log, view_of
from .store_heads import (
    ProveOwners,
    heads_or_proof,
    judged_on_store_heads,
    proven_heads,
    source_heads_proven,
    untrusted_store,
)
from .wire import DecisionDetail

T = TypeVar("T")
# A plan superseding a plan that the gate refused as stale gets no second replan.
REFUSED_AS_STALE = Flag(AUDIT_SOURCE, BUDGET_REASONS)


class Gate(GuardedExecutor):
    """PlanFence: allow only calls whose plan frontier equals the owners' heads.

    Args:
        store: where plans, records and the audit log live.
        policy: the declared scopes D(a) per tool.
        heads: where heads come from; default the store itself (its owners' authoritative table).
            With `verify_heads` too, both hold: every owner is proven by its signed claims before
            it is asked, and heads the source does not have signed by their owners
            (`HttpOwnerHeads` does) must be the owners' signed heads in the store.
        max_records: bound on a lineage walk (over it: `lineage_too_large`).
        audit: how decisions are recorded. `"deferred"` (default): refusals written before the
            gate answers, allows queued and written by group commit within 50 ms (see
            `audit_writer`; an allow blocks with `audit_unavailable` when the log cannot keep
            up); `aclose()` or `flush()` writes the queue. `"durable"` (or True): every
            decision written before the gate answers (an allow whose record cannot be written
            becomes a block). `"off"` (or False): only the stale refusals the replan budget
            needs.
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
        audit: AuditMode = DEFAULT_AUDIT,
        agent: str | None = None,
        verify_heads: HeadVerifier | None = None,
        owner_assigners: Collection[str] | None = None,
    ) -> None:
        self.audit_mode = audit_mode(audit)
        self.store = store
        self.signed_heads = untrusted_store(verify_heads, owner_assigners)
        self.policy = policy
        self.head_source = heads
        self.max_records = max_records
        self.audit = self.audit_mode != "off"
        self.deferred = (
            DeferredAudit(store, decision=self._queued_decision)
            if self.audit_mode == "deferred"
            else None
        )
        self.agent = agent
        # Records are immutable: the frontiers of lineages already walked are remembered (per
        # store), so checking a plan costs one row per parent whatever the lineage's depth.
        self.frontier_memo = frontier_memo(store)
        # With the store's heads taken on trust, an allow rests on nothing the store does not
        # hold: a repeated call whose keys have not moved repeats it (durable audit writes
        # each allow with its reads, in one transaction, instead).
        self.repeats = (
            Repeats()
            if heads is None and self.signed_heads is None and self.audit_mode != "durable"
            else None
        )
        # With the store's heads taken on trust, a check needs no I/O between its snapshot and
        # its verdict, so an audited one reads and writes in one transaction.
        self._one_transaction = (
            self.audit and self.deferred is None and heads is None and self.signed_heads is None
        )

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
        agent = agent or self.agent
        decision_id: int | None = None
        try:
            declared = self.policy.get(tool)
            call = None
            if self.repeats is not None:
                call = Repeats.call(tool, declared, args, plan_id, agent)
            verdict = None if call is None else await self._repeated(call, declared, args, start)
            if verdict is None:
                req = CheckRequest(tool, args, plan_id, agent, replan_spent)
                verdict, decision_id = await self._judged(req, start)
                if call is not None:
                    assert self.repeats is not None
                    self.repeats.remember(call, declared, verdict)  # if it is an allow
        except Exception as exc:  # fail closed on anything unexpected
            verdict = self._stamp(fail_closed(tool, plan_id, agent, exc), start)
        return await self._recorded(verdict, decision_id)

    async def _recorded(self, verdict: Verdict, decision_id: int | None) -> Verdict:
        """The verdict, once its audit record is written or queued (or it blocks: see
        `_audit_failed`); `decision_id` is the record written with the check's reads."""
        try:
            if self.deferred is not None and verdict.verdict == ALLOW:
                if self.deferred.append(verdict):  # overdue: the writer has not had the loop
                    await self.deferred.catch_up()
                return verdict
            # Refusals for staleness are what the one-replan budget is made of: they are
            # recorded even with audit off, so the budget holds across gates and processes.
            if decision_id is None and (self.audit or verdict.reason in BUDGET_REASONS):
                decision_id = await self.store.log(self._decision(verdict))
        except Exception as exc:
            return self._audit_failed(verdict, exc)
        return verdict if decision_id is None else verdict.evolve(decision_id=decision_id)

    async def _repeated(
        self, call: Call, declared: ToolPolicy | None, args: Mapping[str, Any], start: float
    ) -> Verdict | None:
        """The allow this tool, plan, agent and D(a) were given before, when the plan is still
        in the store and every key of D(a) has the head and owner epoch it was given on (see
        `repeats`); None: check it the full way."""
        assert self.repeats is not None
        allowed = self.repeats.get(call, declared)
        if allowed is None:
            return None
        try:
            plans, states = await self.store.read(allowed.reads)
        except PlanFenceError:
            plans, states = {}, {}  # the full way says what failed
        if call[1] in plans and allowed.holds(states):
            return self.repeats.again(allowed, args, _elapsed_ms(start))
        self.repeats.forget(call)
        return None

    async def preview(
        self, tool: str, args: Mapping[str, Any], plan_id: Any, *, agent: str | None = None
    ) -> Verdict:
        """The verdict `check` would give now, from the same flow and reads, writing nothing: no
        audit entry, so no replan budget spent either (a dry run, as `planfence check` makes)."""
        req = CheckRequest(tool, args, plan_id, agent or self.agent)
        start = time.perf_counter()
        try:
            verdict, _ = await self._judged(req, start, write=False)
        except Exception as exc:
            verdict = self._stamp(fail_closed(tool, plan_id, req.agent, exc), start)
        return verdict

    @staticmethod
    def _stamp(verdict: Verdict, start: float) -> Verdict:
        return verdict.evolve(latency_ms=_elapsed_ms(start))

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

    async def _judged(
        self, req: CheckRequest, start: float, *, write: bool = True
    ) -> tuple[Verdict, int | None]:
        """The check's verdict, and the id of its audit record when it was written with the
        reads. With audit on and the store's heads taken on trust, the plan's snapshot, the
        verdict and its audit record share one store transaction (`_judged_in_snapshot`); a
        replan then reads its budget and records outside it. `write=False`: reads only
        (`preview`)."""
        flow = gate_flow(req, self.policy, max_records=self.max_records)
        try:
            request = next(flow)
            if write and isinstance(request, LoadPlan) and self._one_transaction:
                verdict, decision_id, view = await self._judged_in_snapshot(req, request, start)
                if view is None:
                    return verdict, decision_id
                flow = replan_flow(req, request.scope, view, verdict)
                request = next(flow)
            while True:
                request = flow.send(await self._read(request))
        except StopIteration as stop:
            return self._stamp(stop.value, start), None

    async def _judged_in_snapshot(
        self, req: CheckRequest, load: LoadPlan, start: float
    ) -> tuple[Verdict, int | None, PlanView | None]:
        """Read the snapshot, judge it and write the verdict's audit record in one transaction;
        a replan is not written yet (the view comes back for `replan_flow` to finish it)."""
        logged: Verdict | None = None

        def audit_record(judged: tuple[PlanView, Verdict]) -> Decision | None:
            nonlocal logged
            if judged[1].verdict == REPLAN:
                return None
            logged = self._stamp(judged[1], start)
            return self._decision(logged)

        try:
            (view, verdict), decision_id = await snapshot_and_log(
                self.store,
                load.plan_id,
                load.scope,
                partial(judged_on_store_heads, req, load.scope, load.max_records),
                audit_record,
                max_records=load.max_records,
                flag=REFUSED_AS_STALE,
                memo=self.frontier_memo,
            )
        except Exception as exc:
            if logged is not None:  # judged, but its audit record did not commit
                return self._audit_failed(logged, exc), None, None
            failure = _read_failure(exc)
            if failure is None:
                raise
            return self._stamp(failed(req, load.scope, failure), start), None, None
        if logged is not None:
            return logged, decision_id, None
        return verdict, None, view

    async def _read(self, request: IORequest) -> Any:
        """Do the read the flow asks for; a store failure is answered with its `IOFailure`."""
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
                return view_of(snap)
            if isinstance(request, AskOwners):
                return await self._heads(request)
            if isinstance(request, ReloadOwners):
                return await self.store.states(request.keys)
            if isinstance(request, LoadRecords):
                return await self.store.get_many(request.ids)
            if isinstance(request, Audited):
                return await self._audited(request)
        except PlanFenceError as exc:
            failure = _read_failure(exc)
            assert failure is not None
            return failure
        return IOFailure(INTERNAL_ERROR, f"unknown read {type(request).__name__}")

    async def _heads(self, ask: AskOwners) -> Mapping[str, HeadAnswer]:
        """The owners' heads: from the head source, or from the view the check read (with the
        feed's owner changes first, when owners must be proven)."""
        if self.head_source is not None:
            if self.signed_heads is None:
                return await self.head_source.heads(ask.owners)
            return await source_heads_proven(self.store, self.head_source, ask, self.signed_heads)
        assert ask.view is not None
        answer = heads_or_proof(ask.view, ask, self.signed_heads)
        if isinstance(answer, ProveOwners):
            assert self.signed_heads is not None
            return await proven_heads(self.store, answer, self.signed_heads)
        return answer

    async def _audited(self, question: Audited) -> bool:
        """Whether the journal (or this gate's deferred queue) holds a gate decision about the
        plan with one of the reasons."""
        if self.deferred is not None and self.deferred.holds(question.plan_id, question.reasons):
            return True
        labels = {"reason": question.reasons}
        found = await self.store.journal(
            kind=AUDIT_SOURCE, subject=question.plan_id, labels=labels, limit=1
        )
        return bool(found)

    def _queued_decision(self, queued: object, at: str) -> Decision:
        """The audit record of an allow the deferred audit queued, stamped when it was decided."""
        assert isinstance(queued, Verdict)
        return self._decision(queued, at)

    def _decision(self, v: Verdict, at: str = "") -> Decision:
        return Decision(
            source=AUDIT_SOURCE,
            verdict=v.verdict,
            reason=v.reason,
            agent=v.agent,
            tool=v.tool,
            plan=v.plan,
            payload=DecisionDetail.record(v, self.name),
            at=at,
        )

    async def flush(self) -> None:
        """Write the allows the deferred audit has queued (a reader of the journal that needs
        them calls this first); raise `AuditBacklogError` if they cannot be written."""
        if self.deferred is not None:
            await self.deferred.flush()

    async def __aenter__(self) -> Gate:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        """Write the deferred audit's queue (if any) and close the head source."""
        try:
            if self.deferred is not None:
                await self.deferred.aclose()
        finally:
            if self.head_source is not None:
                await self.head_source.aclose()


def _elapsed_ms(start: float) -> float:
    """Milliseconds since `start` (a `perf_counter` reading), as a verdict's latency."""
    return round((time.perf_counter() - start) * 1000, 4)


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
