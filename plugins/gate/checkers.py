"""What judges a call inside a `GateMiddleware`: the gate, built per store.

The middleware builds `gate_checker(store, policy, agent, audit=...)` for each store it reaches,
or judges with the `Gate` its user gave it. Experiments that compare the gate with a baseline
(the demos and benchmarks, the conformance suite's controls) swap the checker with `judge_with`
after the middleware is built: no constructor argument, configuration file or name reaches it,
so no configuration can turn a gate into something that proves less.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, cast

from planfence.shared_memory import AsyncStore

from .audit_writer import DEFAULT_AUDIT, AuditMode
from .call import Checker
from .gate import Gate
from .policy import Policy

if TYPE_CHECKING:
    from .middleware import GateMiddleware

CheckerFactory = Callable[[AsyncStore, Policy, "str | None"], Checker]


def gate_checker(
    store: AsyncStore, policy: Policy, agent: str | None = None, *, audit: AuditMode = DEFAULT_AUDIT
) -> Gate:
    """The default: the PlanFence gate over the store."""
    return Gate(store, policy, agent=agent, audit=audit)


def judge_with(middleware: GateMiddleware, checker: Checker | CheckerFactory) -> GateMiddleware:
    """For experiments only: make `middleware` judge with `checker` (a ready checker, or a
    factory `(store, policy, agent) -> checker` built once per store) instead of its gate.

    Everything around the checker stays: the middleware stack, fail-closed refusals, fencing
    tokens and leases. Returns `middleware`."""
    middleware._by_store = {}
    if callable(getattr(checker, "check", None)):
        middleware.fixed, middleware.factory = cast(Checker, checker), gate_checker
    else:
        middleware.fixed, middleware.factory = None, cast(CheckerFactory, checker)
    return middleware
