"""Running a tool under the gate's verdict: the one-replan loop (`executor.executor_flow`) with
each check judged by the seam's guard, so the tool runs inside the guard of its allow (it sees
the fencing token and holds the lease its policy declares), as every adapter's tool does.
`GateMiddleware.run` and `run_sync` are these."""

from __future__ import annotations

from collections.abc import Callable, Generator, Mapping
from contextlib import AbstractAsyncContextManager, AbstractContextManager
from typing import Any, Protocol

from .call import ToolCall
from .decision import Verdict
from .executor import (
    AskReplan,
    Call,
    CallFn,
    Check,
    Outcome,
    ReplanFn,
    Replanned,
    Step,
    executor_flow,
)


class _Judged(Protocol):
    @property
    def verdict(self) -> Verdict: ...


class Guard(Protocol):
    """What the loop needs of the seam: judge a call, and hold its allow while the tool runs."""

    def guard(self, call: ToolCall) -> AbstractAsyncContextManager[_Judged]: ...

    def guard_sync(self, call: ToolCall) -> AbstractContextManager[_Judged]: ...


async def run(seam: Guard, call: ToolCall, fn: CallFn, replan: ReplanFn | None) -> Outcome:
    """Check `call`, replan once if told to (`replan` gets the refusal, with the current
    records), and run `fn(args)` only on an allow, inside the allow's guard."""
    flow = executor_flow(call, replan is not None)
    step: Step | Outcome = next(flow)
    while not isinstance(step, Outcome):
        if isinstance(step, AskReplan):
            assert replan is not None
            step = _send(flow, await replan(step.verdict))
            continue
        assert isinstance(step, Check)
        async with seam.guard(step.call) as judged:
            step = _send(flow, judged.verdict)
            if isinstance(step, Call):
                step = _send(flow, await fn(step.args))
    return step


def run_sync(
    seam: Guard,
    call: ToolCall,
    fn: Callable[[Mapping[str, Any]], Any],
    replan: Callable[[Verdict], Replanned | None] | None,
) -> Outcome:
    """`run` for sync code: checks through `seam.guard_sync`, the tool on the caller's thread."""
    flow = executor_flow(call, replan is not None)
    step: Step | Outcome = next(flow)
    while not isinstance(step, Outcome):
        if isinstance(step, AskReplan):
            assert replan is not None
            step = _send(flow, replan(step.verdict))
            continue
        assert isinstance(step, Check)
        with seam.guard_sync(step.call) as judged:
            step = _send(flow, judged.verdict)
            if isinstance(step, Call):
                step = _send(flow, fn(step.args))
    return step


def _send(flow: Generator[Step, Any, Outcome], answer: Any) -> Step | Outcome:
    try:
        return flow.send(answer)
    except StopIteration as stop:
        outcome: Outcome = stop.value
        return outcome


__all__ = ["Guard", "run", "run_sync"]
