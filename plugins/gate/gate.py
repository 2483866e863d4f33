"""The gate: judges each call just before it runs (`check`), records every decision, and
answers what it would judge without writing (`preview`). It only wires its parts together; one
check's walk is in `checking`, its recording in `recording`. Running a tool under a verdict
(fencing token, lease, the one replan) is the seam's: `GateMiddleware.run`. Async first;
`SyncGate` is the sync twin.
"""

from __future__ import annotations

import time
from collections.abc import Collection
from dataclasses import replace
from functools import partial

from planfence.plugins.telemetry import gate_span
from planfence.shared_memory import AsyncStore
from planfence.shared_memory.signing import HeadVerifier

from . import checking
from .audit import Decision
from .audit_writer import DEFAULT_AUDIT, AuditMode, DeferredAudit, audit_mode
from .call import ToolCall
from .check_snapshot import frontier_memo
from .checking import Reads, Walk
from .decision import STALE, Verdict
from .heads import HeadSource
from .policy import Policy
from .recording import Recorder, decision_of
from .repeats import Repeats
from .store_heads import untrusted_store


class Gate:
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
        self.agent = agent
        self.max_records = max_records
        self.signed_heads = untrusted_store(verify_heads, owner_assigners)
        self.head_source = heads
        deferred = (
            DeferredAudit(store, decision=partial(_queued_decision, self.name))
            if self.audit_mode == "deferred"
            else None
        )
        self.recorder = Recorder(store, self.name, self.audit_mode != "off", deferred)
        trusted = heads is None and self.signed_heads is None
        reads = Reads(
            store,
            max_records,
            # Records are immutable: the frontiers of lineages already walked are remembered
            # (per store), so checking a plan costs one row per parent whatever its depth.
            frontier_memo(store),
            self.recorder,
            heads,
            self.signed_heads,
        )
        self.walk = Walk(
            policy,
            reads,
            self.recorder,
            # With the store's heads taken on trust, an allow rests on nothing the store does
            # not hold: a repeated call whose keys have not moved repeats it (durable audit
            # writes each allow with its reads, in one transaction, instead).
            Repeats() if trusted and self.audit_mode != "durable" else None,
            # ... and a check needs no I/O between its snapshot and its verdict, so an audited
            # one reads and writes in one transaction.
            trusted and self.audit_mode == "durable",
        )

    @property
    def policy(self) -> Policy:
        """The declared scopes the gate checks against; setting it takes effect at the next
        check (an allow the old declaration gave is not repeated under the new one)."""
        return self.walk.policy

    @policy.setter
    def policy(self, policy: Policy) -> None:
        self.walk = replace(self.walk, policy=policy)

    @property
    def deferred(self) -> DeferredAudit | None:
        """The queue of allows the deferred audit has yet to write (None: not deferred)."""
        return self.recorder.deferred

    @property
    def repeats(self) -> Repeats | None:
        """The allows a repeated call may be given again (None: every call the full way)."""
        return self.walk.repeats

    async def check(self, call: ToolCall) -> Verdict:
        """Judge one call just before it runs; never raises for bad input, blocks instead."""
        call = call.by(self.agent)
        start = time.perf_counter()
        with gate_span(call.tool, call.agent) as traced:
            verdict = await checking.check(self.walk, call)
            traced.gate(verdict, time.perf_counter() - start)
        return verdict

    async def preview(self, call: ToolCall) -> Verdict:
        """The verdict `check` would give now, from the same flow and reads, writing nothing: no
        audit entry, so no replan budget spent either (a dry run, as `planfence check` makes)."""
        return await checking.preview(self.walk, call.by(self.agent))

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


def _queued_decision(checker: str, queued: object, at: str) -> Decision:
    """The audit record of an allow the deferred audit queued, stamped when it was decided."""
    assert isinstance(queued, Verdict)
    return decision_of(checker, queued, at)


__all__ = ["STALE", "AuditMode", "Gate"]
