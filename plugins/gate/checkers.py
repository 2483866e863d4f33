"""What judges a call inside a `GateMiddleware`: the gate, built per store.

The middleware builds `gate_checker(store, policy, agent, audit=...)` for each store it reaches,
or judges with the `Gate` its user gave it. Experiments that compare the gate with a baseline
(the demos and benchmarks, the conformance suite's controls) swap the checker after the
middleware is built (`middleware.judge_with`): no constructor argument, configuration file or
name reaches it, so no configuration can turn a gate into something that proves less.
"""

from __future__ import annotations

from collections.abc import Callable

from planfence.shared_memory import AsyncStore

from .audit_writer import DEFAULT_AUDIT, AuditMode
from .call import Checker
from .gate import Gate
from .policy import Policy

CheckerFactory = Callable[[AsyncStore, Policy, "str | None"], Checker]


def gate_checker(
    store: AsyncStore, policy: Policy, agent: str | None = None, *, audit: AuditMode = DEFAULT_AUDIT
) -> Gate:
    """The default: the PlanFence gate over the store."""
    return Gate(store, policy, agent=agent, audit=audit)
