"""One check's walk: the allow a repeated call was given before, else the flow driven against the
store and the owners, then the verdict recorded. `Gate` builds a `Walk` from its options and
hands each call to `check` (or `preview`, which reads and writes nothing).

The steps are parts the walk is given: the repeat cache (`repeats`), the reads (`Reads`), the
recording (`recording.Recorder`); with the store's heads taken on trust and every decision
recorded at once, the check's snapshot, its verdict and its record share one transaction.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from dataclasses import dataclass
from functools import partial
from typing import Any

from planfence.shared_memory import AsyncStore, IntegrityError, PlanfenceError, StoreError
from planfence.shared_memory.lineage_memo import FrontierMemo

from .audit import AUDIT_SOURCE
from .call import ToolCall
from .check_snapshot import Flag, snapshot, snapshot_and_log, view_of
from .decision import (
    BUDGET_REASONS,
    INTERNAL_ERROR,
    REPLAN,
    STORE_UNAVAILABLE,
    UNKNOWN_RECORD,
    AskOwners,
    Audited,
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
from .heads import HeadSource
from .policy import Policy
from .recording import Recorder, decision_of, unrecorded
from .repeats import Repeats
from .store_heads import (
    ProveOwners,
    SignedHeads,
    heads_or_proof,
    judged_on_store_heads,
    proven_heads,
    source_heads_proven,
)

# A plan superseding a plan that the gate refused as stale gets no second replan.
REFUSED_AS_STALE = Flag(AUDIT_SOURCE, BUDGET_REASONS)


@dataclass(frozen=True)
class Reads:
    """Answers the reads a check's flow asks for: from the store, and from the head source
    (None: the heads the check read from the store, proven when the store is not trusted)."""

    store: AsyncStore
    max_records: int
    memo: FrontierMemo
    recorder: Recorder
    source: HeadSource | None = None
    signed: SignedHeads | None = None

    async def answer(self, request: IORequest) -> Any:
        """Do the read the flow asks for; a store failure is answered with its `IOFailure`."""
        try:
            if isinstance(request, LoadPlan):
                snap = await snapshot(
                    self.store,
                    request.plan_id,
                    request.scope,
                    max_records=request.max_records,
                    flag=REFUSED_AS_STALE,
                    memo=self.memo,
                )
                return view_of(snap)
            if isinstance(request, AskOwners):
                return await self.heads(request)
            if isinstance(request, ReloadOwners):
                return await self.store.states(request.keys)
            if isinstance(request, LoadRecords):
                return await self.store.get_many(request.ids)
            if isinstance(request, Audited):
                return await self.recorder.holds(request.plan_id, request.reasons)
        except PlanfenceError as exc:
            failure = read_failure(exc)
            assert failure is not None
            return failure
        return IOFailure(INTERNAL_ERROR, f"unknown read {type(request).__name__}")

    async def heads(self, ask: AskOwners) -> Mapping[str, HeadAnswer]:
        """The owners' heads: from the head source, or from the view the check read (with the
        feed's owner changes first, when owners must be proven)."""
        if self.source is not None:
            if self.signed is None:
                return await self.source.heads(ask.owners)
            return await source_heads_proven(self.store, self.source, ask, self.signed)
        assert ask.view is not None
        answer = heads_or_proof(ask.view, ask, self.signed)
        if isinstance(answer, ProveOwners):
            assert self.signed is not None
            return await proven_heads(self.store, answer, self.signed)
        return answer


@dataclass(frozen=True)
class Walk:
    """What a gate checks with (see `Gate` for the options these come from).

    `one_transaction`: the store's heads are taken on trust and every decision is written at
    once, so a check's snapshot, verdict and record share one transaction.
    """

    policy: Policy
    reads: Reads
    recorder: Recorder
    repeats: Repeats | None
    one_transaction: bool


async def check(walk: Walk, call: ToolCall) -> Verdict:
    """Judge `call` and record the verdict; never raises for bad input, blocks instead."""
    start = time.perf_counter()
    decision_id: int | None = None
    try:
        declared = walk.policy.get(call.tool)
        key = None if walk.repeats is None else Repeats.call(call, declared)
        verdict = None if key is None else await _repeated(walk, key, declared, call, start)
        if verdict is None:
            verdict, decision_id = await _judged(walk, call, start)
            if key is not None:
                assert walk.repeats is not None
                walk.repeats.remember(key, declared, verdict)  # if it is an allow
    except Exception as exc:  # fail closed on anything unexpected
        verdict = _stamp(fail_closed(call.tool, call.plan, call.agent, exc), start)
    return await walk.recorder.record(verdict, decision_id)


async def preview(walk: Walk, call: ToolCall) -> Verdict:
    """The verdict `check` would give now, from the same flow and reads, writing nothing."""
    start = time.perf_counter()
    try:
        verdict, _ = await _judged(walk, call, start, write=False)
    except Exception as exc:
        verdict = _stamp(fail_closed(call.tool, call.plan, call.agent, exc), start)
    return verdict


async def _repeated(
    walk: Walk, key: Any, declared: Any, call: ToolCall, start: float
) -> Verdict | None:
    """The allow this tool, plan, agent and D(a) were given before, when the plan is still in
    the store and every key of D(a) has the head and owner epoch it was given on (see
    `repeats`); None: check it the full way."""
    assert walk.repeats is not None
    allowed = walk.repeats.get(key, declared)
    if allowed is None:
        return None
    try:
        plans, states = await walk.reads.store.read(allowed.reads)
    except PlanfenceError:
        plans, states = {}, {}  # the full way says what failed
    if call.plan in plans and allowed.holds(states):
        return walk.repeats.again(allowed, call, elapsed_ms(start))
    walk.repeats.forget(key)
    return None


async def _judged(
    walk: Walk, call: ToolCall, start: float, *, write: bool = True
) -> tuple[Verdict, int | None]:
    """The check's verdict, and the id of its audit record when it was written with the reads
    (`_judged_in_snapshot`); a replan then reads its budget and records outside it."""
    flow = gate_flow(call, walk.policy, max_records=walk.reads.max_records)
    try:
        request = next(flow)
        if write and isinstance(request, LoadPlan) and walk.one_transaction:
            verdict, decision_id, view = await _judged_in_snapshot(walk, call, request, start)
            if view is None:
                return verdict, decision_id
            flow = replan_flow(call, request.scope, view, verdict)
            request = next(flow)
        while True:
            request = flow.send(await walk.reads.answer(request))
    except StopIteration as stop:
        return _stamp(stop.value, start), None


async def _judged_in_snapshot(
    walk: Walk, call: ToolCall, load: LoadPlan, start: float
) -> tuple[Verdict, int | None, PlanView | None]:
    """Read the snapshot, judge it and write the verdict's audit record in one transaction; a
    replan is not written yet (the view comes back for `replan_flow` to finish it)."""
    logged: Verdict | None = None
    checker = walk.recorder.checker

    def audit_record(judged: tuple[PlanView, Verdict]) -> Any:
        nonlocal logged
        if judged[1].verdict == REPLAN:
            return None
        logged = _stamp(judged[1], start)
        return decision_of(checker, logged)

    try:
        (view, verdict), decision_id = await snapshot_and_log(
            walk.reads.store,
            load.plan_id,
            load.scope,
            partial(judged_on_store_heads, call, load.scope, load.max_records),
            audit_record,
            max_records=load.max_records,
            flag=REFUSED_AS_STALE,
            memo=walk.reads.memo,
        )
    except Exception as exc:
        if logged is not None:  # judged, but its audit record did not commit
            return unrecorded(logged, exc), None, None
        failure = read_failure(exc)
        if failure is None:
            raise
        return _stamp(failed(call, load.scope, failure), start), None, None
    if logged is not None:
        return logged, decision_id, None
    return verdict, None, view


def _stamp(verdict: Verdict, start: float) -> Verdict:
    return verdict.evolve(latency_ms=elapsed_ms(start))


def elapsed_ms(start: float) -> float:
    """Milliseconds since `start` (a `perf_counter` reading), as a verdict's latency."""
    return round((time.perf_counter() - start) * 1000, 4)


def read_failure(exc: BaseException) -> IOFailure | None:
    """Map a store error to the block it causes; None for errors that are not the store's."""
    if isinstance(exc, IntegrityError):
        return IOFailure(UNKNOWN_RECORD, f"record fails its integrity check: {exc}")
    if isinstance(exc, StoreError):
        return IOFailure(STORE_UNAVAILABLE, f"store: {exc}")
    if isinstance(exc, PlanfenceError):
        return IOFailure(INTERNAL_ERROR, str(exc))
    return None
