"""What every framework adapter is made of, whatever the framework: the store reached through a
`StoreBridge`, the gate (`GateMiddleware`) that judges its tool calls, and the plan chains
(`PlanStamper`) it stamps from the records it shows the model.

A store that cannot be reached while the adapter reads or stamps is never an exception in the
framework's loop: `read` and `stamp` answer `PlanUnavailable` instead, the model is told the
records cannot be read, and the gate refuses every gated call made under it as
`store_unavailable`, in the framework's own refusal form.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from planfence.plugins.gate import (
    AuditMode,
    CheckerFactory,
    GateMiddleware,
    Middleware,
    PlanStamper,
    Policy,
)
from planfence.plugins.gate.outage import PlanUnavailable, store_down
from planfence.plugins.gate.plans import Reads
from planfence.shared_memory import AsyncStore, Record, Store, StoreBridge

from ._records import records_text, unreadable_text


class Fenced:
    """The gate side an adapter shares; it calls `_fence` from its own constructor, whose
    signature stays the framework's public API."""

    bridge: StoreBridge
    gate: GateMiddleware
    agent: str

    def _fence(
        self,
        store: AsyncStore | Store | StoreBridge | str,
        policy: Policy | Mapping[str, Any] | str,
        agent: str,
        /,
        *,
        checker: CheckerFactory | str | None,
        middleware: Iterable[Middleware],
        audit: AuditMode,
    ) -> None:
        self.gate = GateMiddleware(
            store, policy, checker=checker, agent=agent, middleware=middleware, audit=audit
        )
        self.bridge, self.agent = self.gate.bridge, agent

    def new_stamper(self) -> PlanStamper:
        """A plan chain of its own (one per run, invocation or framework agent)."""
        return PlanStamper(self.bridge, self.agent)

    async def aclose(self) -> None:
        """Close the gate (a deferred audit writes the allows it has queued)."""
        await self.gate.aclose()


async def read(
    stamper: PlanStamper, keys: Sequence[str], prefixes: Sequence[str] = ()
) -> list[Record] | PlanUnavailable:
    """The current records to show, or `PlanUnavailable` when the store cannot be reached."""
    try:
        return await stamper.current(keys, prefixes)
    except Exception as exc:
        if not store_down(exc):
            raise
        return PlanUnavailable.of(exc)


async def stamp(
    stamper: PlanStamper, reads: Reads | PlanUnavailable, **fields: Any
) -> str | PlanUnavailable:
    """The id of a plan citing `reads` (`PlanStamper.stamp`'s fields), or `PlanUnavailable`
    when the store cannot be reached (or could not be when the records were read)."""
    if isinstance(reads, PlanUnavailable):
        return reads
    try:
        return (await stamper.stamp(reads, **fields)).id
    except Exception as exc:
        if not store_down(exc):
            raise
        return PlanUnavailable.of(exc)


def shown_text(header: str, shown: list[Record] | PlanUnavailable) -> str:
    """The records as the model reads them, or why they cannot be read."""
    if isinstance(shown, PlanUnavailable):
        return unreadable_text(shown.error)
    return records_text(header, shown)


def reads_or_down(shown: list[Record] | PlanUnavailable) -> list[str] | PlanUnavailable:
    """The record ids a plan from `shown` cites (or why there are none)."""
    return shown if isinstance(shown, PlanUnavailable) else [r.id for r in shown]


__all__ = ["Fenced", "PlanUnavailable", "read", "reads_or_down", "shown_text", "stamp"]
