"""The executor loop shared by the gate and the baselines: check; if told to replan, ask once for
a new plan and check it; run the call only on an allow. `executor_flow` is the loop without I/O;
`middleware.run_guarded` drives it through the seam's guard (for `GuardedExecutor.run`, and
`run_guarded_sync` for `SyncGate.run`, its sync twin).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Generator, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from planfence.shared_memory import AsyncStore

from .decision import ALLOW, BLOCK, REPLAN, Verdict
from .policy import Policy


@dataclass(frozen=True)
class Replanned:
    """What a replan callback returns: the new plan and the arguments it authorises."""

    plan_id: str
    args: Mapping[str, Any]


ReplanFn = Callable[[Verdict], Awaitable[Replanned | None]]
CallFn = Callable[[Mapping[str, Any]], Awaitable[Any]]


@dataclass(frozen=True)
class Outcome:
    """What happened to one guarded action."""

    tool: str
    executed: bool
    args: Mapping[str, Any]
    plan_id: str | None
    verdicts: tuple[Verdict, ...]
    result: Any = None

    @property
    def final(self) -> Verdict:
        return self.verdicts[-1]

    @property
    def replans(self) -> int:
        return sum(1 for v in self.verdicts if v.verdict == REPLAN)

    @property
    def blocked(self) -> bool:
        return self.final.verdict == BLOCK


@dataclass(frozen=True)
class Check:
    args: Mapping[str, Any]
    plan_id: Any
    replan_spent: bool


@dataclass(frozen=True)
class AskReplan:
    verdict: Verdict


@dataclass(frozen=True)
class Call:
    args: Mapping[str, Any]


Step = Check | AskReplan | Call


def executor_flow(
    tool: str, args: Mapping[str, Any], plan_id: Any, can_replan: bool
) -> Generator[Step, Any, Outcome]:
    """The one-replan loop without I/O: check; if told to replan, ask once for a new plan and
    check it; run the call only on an allow. Driven by `GuardedExecutor.run` and `SyncGate.run`."""
    verdicts: list[Verdict] = [(yield Check(args, plan_id, False))]
    if verdicts[-1].verdict == REPLAN and can_replan:
        fresh: Replanned | None = yield AskReplan(verdicts[-1])
        if fresh is not None:
            args, plan_id = fresh.args, fresh.plan_id
            verdicts.append((yield Check(args, plan_id, True)))
    if verdicts[-1].verdict != ALLOW:
        return Outcome(tool, False, args, plan_id, tuple(verdicts))
    result = yield Call(args)
    return Outcome(tool, True, args, plan_id, tuple(verdicts), result)


class Checker(Protocol):
    """Anything that can judge one call: the gate, or a baseline executor."""

    name: str

    async def check(
        self,
        tool: str,
        args: Mapping[str, Any],
        plan_id: Any,
        *,
        agent: str | None = None,
        replan_spent: bool = False,
    ) -> Verdict: ...


class GuardedExecutor:
    """The executor loop shared by the gate and the baselines: check; if told to replan, call the
    replan callback once with the fresh records; check the new plan; run or refuse."""

    name = "executor"
    store: AsyncStore
    policy: Policy

    async def check(
        self,
        tool: str,
        args: Mapping[str, Any],
        plan_id: Any,
        *,
        agent: str | None = None,
        replan_spent: bool = False,
    ) -> Verdict:
        raise NotImplementedError

    async def run(
        self,
        tool: str,
        args: Mapping[str, Any],
        plan_id: str | None,
        call: CallFn,
        replan: ReplanFn | None = None,
        *,
        agent: str | None = None,
    ) -> Outcome:
        """Check, replan once if told to, and run `call` only on an allow: inside the allow's
        guard (`GateMiddleware.guard`), with its fencing token as `planfence.fence.current()`
        and the lease the tool's policy declares held until `call` returns."""
        from .middleware import GateMiddleware, run_guarded  # it builds on this module

        seam = self.__dict__.get("_seam")
        if seam is None:
            seam = self.__dict__["_seam"] = GateMiddleware(self.store, self.policy, checker=self)
        return await run_guarded(seam, tool, args, plan_id, call, replan, agent=agent)
