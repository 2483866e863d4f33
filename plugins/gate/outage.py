"""A store that cannot be reached, as the seam sees it: one refusal, `store_unavailable`.

Whatever an adapter was doing when the store went away (showing the records, stamping the plan,
checking the call), the call it leads to is refused the same way. An adapter whose read or stamp
failed acts under `PlanUnavailable` instead of a plan id; the seam refuses every gated call made
under it, and a call the gate cannot check for the same reason is refused the same way.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from planfence.shared_memory import StoreUnavailableError

from .decision import BLOCK, STORE_UNAVAILABLE, Verdict, fail_closed


def store_down(exc: BaseException) -> bool:
    """Whether `exc` says the store cannot be reached, or was closed."""
    if isinstance(exc, StoreUnavailableError):
        return True
    # A closed sync `Store` answers from its stopped portal with this RuntimeError (until every
    # backend raises `StoreClosedError` on use after close).
    return isinstance(exc, RuntimeError) and "portal is not running" in str(exc)


@dataclass(frozen=True)
class PlanUnavailable:
    """The plan a call would act under could not be read or stamped: the store was down.

    As a `ToolCall.plan` it makes `GateMiddleware` refuse the call as `store_unavailable` when
    its tool is gated (an ungated tool runs without a plan, as ever)."""

    error: str

    @classmethod
    def of(cls, exc: BaseException) -> PlanUnavailable:
        return cls(f"{type(exc).__name__}: {exc}")

    def verdict(self, tool: str, agent: str | None) -> Verdict:
        return unavailable(tool, None, agent, self.error)


def unavailable(tool: str, plan: Any, agent: str | None, error: str) -> Verdict:
    """The block of a call made while the store could not be reached."""
    plan_id = plan if isinstance(plan, str) else None
    message = f"the shared store cannot be reached ({error})"
    return Verdict(BLOCK, STORE_UNAVAILABLE, tool, plan_id, agent, message=message)


def failure(tool: str, plan: Any, agent: str | None, exc: BaseException) -> Verdict:
    """The verdict for a check that could not run at all: `store_unavailable` when the store
    is down, else the gate's fail-closed block."""
    if store_down(exc):
        return unavailable(tool, plan, agent, f"{type(exc).__name__}: {exc}")
    return fail_closed(tool, plan, agent, exc)


__all__ = ["PlanUnavailable", "failure", "store_down", "unavailable"]
