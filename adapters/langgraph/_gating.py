"""LangGraph tool calls through the gate's seam: a `ToolCallRequest` becomes a `ToolCall`, and a
`Refused` becomes the error `ToolMessage` the model reads. Shared by the agent middleware and the
hand-written graph's tool node."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import replace
from typing import Any

from planfence.plugins.gate import (
    DEFAULT_AUDIT,
    AuditMode,
    Gate,
    Judgement,
    Middleware,
    PlanStamper,
    Policy,
    Refused,
    StepOutcome,
    ToolCall,
    fold_step,
)
from planfence.plugins.gate.outage import PlanUnavailable
from planfence.plugins.gate.reads import ReadSet, merge_reads
from planfence.plugins.gate.steps import REPLANNING
from planfence.shared_memory import AsyncStore, Store
from planfence.shared_memory.extras import extra_imports

with extra_imports("langgraph", "planfence.adapters.langgraph"):
    from langchain_core.messages import ToolMessage
    from langgraph.prebuilt.tool_node import ToolCallRequest
    from langgraph.types import Command

from ..base import Adapter
from .store import ReadLog, track_reads

ToolAnswer = ToolMessage | Command[Any]


def tool_call(request: ToolCallRequest, agent: str | None) -> ToolCall:
    """The seam's view of a request: tool, arguments, and the plan from graph state (or why
    none could be stamped)."""
    state = request.state if isinstance(request.state, Mapping) else {}
    call = request.tool_call
    args = dict(call.get("args") or {})
    down = state.get("planfence_unavailable")
    plan = PlanUnavailable(str(down)) if down else state.get("planfence_plan")
    return ToolCall(call["name"], args, plan, agent)


class ToolGating(Adapter):
    """The seam for a LangGraph class: `gate` judges tool calls, `stamper` stamps plans, over one
    store. Its `wrap_tool_call` / `awrap_tool_call` gate each call: the answer carries the
    verdict and what the tool read, and a refused call never runs."""

    stamper: PlanStamper
    policy: Policy

    def _join_seam(
        self,
        store: AsyncStore | Store,
        policy: Policy | Mapping[str, Any] | str,
        gate: Gate | None,
        agent: str,
        author: str,
        middleware: Iterable[Middleware],
        audit: AuditMode = DEFAULT_AUDIT,
    ) -> None:
        self.attach_gate(store, policy, agent=agent, gate=gate, middleware=middleware, audit=audit)
        self.stamper = PlanStamper(self.bridge, author)
        self.policy = self.gate.policy

    async def aflush(self) -> None:
        """Write the allows the gate's deferred audit has queued (before reading the journal)."""
        await self.gate.flush()

    def flush(self) -> None:
        self.bridge.run(self.aflush)

    def close(self) -> None:
        """`aclose` from sync code."""
        self.bridge.run(self.aclose)

    def _tool_reads(self, log: ReadLog) -> ReadSet:
        """What the tool read, from the stores whose reads plans cite."""
        return log.get(self.gate.bridge.aio)

    def wrap_tool_call(
        self,
        request: ToolCallRequest,
        handler: Callable[[ToolCallRequest], ToolAnswer],
    ) -> ToolAnswer:
        # The tool runs with the allow's fencing token (`planfence.fence.current()`) and holds
        # the lease its policy declares until it returns.
        with self.gate.guard_sync(tool_call(request, self.gate.agent)) as judged:
            if isinstance(judged, Refused):
                return refusal(request, judged)
            with track_reads() as log:
                result = handler(request)
        return with_verdict(result, judged, self._tool_reads(log))

    async def awrap_tool_call(
        self,
        request: ToolCallRequest,
        handler: Callable[[ToolCallRequest], Awaitable[ToolAnswer]],
    ) -> ToolAnswer:
        async with self.gate.guard(tool_call(request, self.gate.agent)) as judged:
            if isinstance(judged, Refused):
                return refusal(request, judged)
            with track_reads() as log:
                result = await handler(request)
        return with_verdict(result, judged, self._tool_reads(log))


def fold_into_state(
    state: object, notes: list[dict[str, Any]]
) -> tuple[StepOutcome | None, dict[str, Any]]:
    """One tool step's payloads folded into its outcome (see `fold_step`), and the state update
    that records it: the outcome's wire form, and one more replan spent when the step was
    refused for one."""
    fields = state if isinstance(state, Mapping) else {}
    spent = int(fields.get("planfence_replans", 0) or 0)
    outcome = fold_step(notes, spent)
    update: dict[str, Any] = {"planfence_outcome": None if outcome is None else outcome.wire()}
    if outcome is not None and outcome.status == REPLANNING:
        update["planfence_replans"] = spent + 1
    return outcome, update


def refusal_message(request: ToolCallRequest, refused: Refused) -> ToolMessage:
    """The error `ToolMessage` the model reads when the gate refuses a call: the refusal in
    words, and its payload as the artifact."""
    return ToolMessage(
        content=refused.message,
        tool_call_id=request.tool_call["id"] or "",
        name=request.tool_call["name"],
        status="error",
        artifact={"planfence": refused.payload.wire()},
    )


def refusal(request: ToolCallRequest, refused: Refused) -> Command[Any]:
    """The refused call's answer: the error message, and the payload for the step's fold."""
    return Command(
        update={
            "messages": [refusal_message(request, refused)],
            "planfence_verdicts": [refused.payload.wire()],
        }
    )


def with_verdict(result: ToolAnswer, judged: Judgement, reads: ReadSet) -> ToolAnswer:
    """The call's own answer, with the gate's payload and what the tool read added to the
    update."""
    extra: dict[str, Any] = {"planfence_verdicts": [judged.payload.wire()]}
    if reads:
        extra["planfence_tool_reads"] = reads
    if isinstance(result, ToolMessage):
        return Command(update={"messages": [result], **extra})
    if isinstance(result, Command) and isinstance(result.update, dict) and result.graph is None:
        log = [*result.update.get("planfence_verdicts", []), *extra["planfence_verdicts"]]
        reads = merge_reads(result.update.get("planfence_tool_reads"), reads)
        update = {**result.update, **extra, "planfence_verdicts": log}
        if reads:
            update["planfence_tool_reads"] = reads
        return replace(result, update=update)
    return result  # an update for the parent graph: nothing of this graph's to add


__all__ = ["ToolGating", "refusal", "refusal_message", "tool_call", "with_verdict"]
