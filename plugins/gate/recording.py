"""Recording a check's verdict in the audit log: before the gate answers, or queued for the
deferred audit (allows); and the block an allow or a replan becomes when its record cannot be
kept, since an allow must be on record before its call runs and the replan budget is made of
recorded refusals."""

from __future__ import annotations

from dataclasses import dataclass, replace

from planfence.shared_memory import AsyncStore

from .audit import AUDIT_SOURCE, Decision
from .audit_writer import DeferredAudit
from .decision import ALLOW, AUDIT_UNAVAILABLE, BLOCK, BUDGET_REASONS, Verdict
from .wire import DecisionDetail


def decision_of(checker: str, verdict: Verdict, at: str = "") -> Decision:
    """The audit record of `verdict`, given by the checker named `checker`."""
    return Decision(
        source=AUDIT_SOURCE,
        verdict=verdict.verdict,
        reason=verdict.reason,
        agent=verdict.agent,
        tool=verdict.tool,
        plan=verdict.plan,
        payload=DecisionDetail.record(verdict, checker),
        at=at,
    )


@dataclass(frozen=True)
class Recorder:
    """Where a gate's verdicts go.

    Args:
        store: holds the audit log.
        checker: the checker's name, in each record's detail.
        audit: every decision is recorded (else only the refusals the replan budget needs).
        deferred: the deferred audit that queues allows (None: allows are written at once).
    """

    store: AsyncStore
    checker: str
    audit: bool
    deferred: DeferredAudit | None

    async def record(self, verdict: Verdict, decision_id: int | None = None) -> Verdict:
        """The verdict, once its record is written or queued (or the block it becomes, see
        `unrecorded`); `decision_id` is the record already written with the check's reads."""
        try:
            if self.deferred is not None and verdict.verdict == ALLOW:
                if self.deferred.append(verdict):  # overdue: the writer has not had the loop
                    await self.deferred.catch_up()
                return verdict
            # Refusals for staleness are what the one-replan budget is made of: they are
            # recorded even with audit off, so the budget holds across gates and processes.
            if decision_id is None and (self.audit or verdict.reason in BUDGET_REASONS):
                decision_id = await self.store.log(decision_of(self.checker, verdict))
        except Exception as exc:
            return unrecorded(verdict, exc)
        return verdict if decision_id is None else verdict.evolve(decision_id=decision_id)

    async def holds(self, plan_id: str, reasons: tuple[str, ...]) -> bool:
        """Whether the log (or the deferred queue) holds a gate decision about the plan with one
        of the reasons."""
        if self.deferred is not None and self.deferred.holds(plan_id, reasons):
            return True
        labels = {"reason": reasons}
        found = await self.store.journal(kind=AUDIT_SOURCE, subject=plan_id, labels=labels, limit=1)
        return bool(found)


def unrecorded(verdict: Verdict, exc: Exception) -> Verdict:
    """What a verdict whose record could not be kept becomes: a block stands; an allow must be
    on record before the call runs, and an unrecorded replan would let the next plan claim a
    fresh replan budget, so both block (`audit_unavailable`)."""
    if verdict.verdict == BLOCK:
        return verdict
    return replace(
        verdict,
        verdict=BLOCK,
        reason=AUDIT_UNAVAILABLE,
        message=f"decision could not be recorded: {exc}",
    )
