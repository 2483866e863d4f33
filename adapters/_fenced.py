"""What every framework adapter is made of, whatever the framework: the store reached through a
`StoreBridge`, the gate (`GateMiddleware`) that judges its tool calls, and the plan chains
(`PlanStamper`) it stamps from the records it shows the model."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from planfence.plugins.gate import (
    AuditMode,
    CheckerFactory,
    GateMiddleware,
    Middleware,
    PlanStamper,
    Policy,
)
from planfence.shared_memory import AsyncStore, Store, StoreBridge


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
