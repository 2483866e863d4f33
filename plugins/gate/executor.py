"""The one-replan loop, without I/O: check; if told to replan, ask once for a new plan and check
it; run the call only on an allow. `runner` drives it through the seam's guard
(`GateMiddleware.run`, and `run_sync`, its sync twin), whatever checker judges the calls.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Generator, Mapping
from dataclasses import dataclass, replace
from typing import Any

from .call import ToolCall
from .decision import ALLOW, BLOCK, REPLAN, Verdict


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
    call: ToolCall


@dataclass(frozen=True)
class AskReplan:
    verdict: Verdict


@dataclass(frozen=True)
class Call:
    args: Mapping[str, Any]


Step = Check | AskReplan | Call


def executor_flow(call: ToolCall, can_replan: bool) -> Generator[Step, Any, Outcome]:
    """The one-replan loop without I/O: check; if told to replan, ask once for a new plan and
    check it; run the call only on an allow."""
    verdicts: list[Verdict] = [(yield Check(call))]
    if verdicts[-1].verdict == REPLAN and can_replan:
        fresh: Replanned | None = yield AskReplan(verdicts[-1])
        if fresh is not None:
            call = replace(call, args=fresh.args, plan=fresh.plan_id, replan_spent=True)
            verdicts.append((yield Check(call)))
    plan = call.plan_id
    if verdicts[-1].verdict != ALLOW:
        return Outcome(call.tool, False, call.args, plan, tuple(verdicts))
    result = yield Call(call.args)
    return Outcome(call.tool, True, call.args, plan, tuple(verdicts), result)
