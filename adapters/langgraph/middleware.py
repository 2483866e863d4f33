"""`PlanfenceAgentMiddleware`: PlanFence inside `langchain.agents.create_agent`.

Each model call is shown the current public records; when the model answers with tool calls, a
plan is stamped whose parents are exactly the record ids it could have planned from: the records
shown on that call, and every version its tools read through a `PlanfenceStore` since its last
replan. Every plan supersedes the run's previous one, whatever happened to it: the gate follows
that chain back through plans that made no gated call, so ungated calls (a weather lookup)
between a refusal and the next plan do not renew the one replan. Every tool call is gated: a
refusal comes back to the model as an error `ToolMessage` naming the changed records, so it
replans once; a second refusal ends the run with `planfence_outcome["status"] == "blocked"`.
The replan count starts afresh only after a gated call was allowed under a current plan, and at
the start of each invocation (a new request: its first plan supersedes nothing). A store that
cannot be reached while the records are shown or the plan is stamped is no exception in the run:
the model is told the records cannot be read, and its gated calls are refused (and the run
ends) as `store_unavailable`.

Order: `PlanfenceAgentMiddleware` must be the innermost middleware around tool calls (the last one
in `middleware=[...]` that wraps tool calls). The gate checks the call it is handed, and the
tool runs when its `handler` returns: a retry or argument-rewriting middleware placed inside it
would run the tool later, again, or with other arguments than the ones checked, with no new
check.

What a run read is kept in that run's graph state, so one compiled agent can serve many runs at
once.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable, Mapping
from typing import Any

from planfence.plugins.gate import DEFAULT_AUDIT, AuditMode, Gate, Middleware, Policy
from planfence.plugins.gate.outage import PlanUnavailable
from planfence.plugins.gate.reads import ReadSet, merge_reads, reads_of, refreshed
from planfence.plugins.gate.steps import BLOCKED, REPLANNING, action_done
from planfence.shared_memory import AsyncStore, Record, Store
from planfence.shared_memory.extras import extra_imports

with extra_imports("langgraph", "planfence.adapters.langgraph"):
    from langchain.agents.middleware import AgentMiddleware, AgentState, hook_config
    from langchain.agents.middleware.types import (
        ExtendedModelResponse,
        ModelRequest,
        ModelResponse,
    )
    from langchain_core.messages import AIMessage, SystemMessage
    from langgraph.runtime import Runtime
    from langgraph.types import Command, Overwrite

from ..base import DEFAULT_HEADER, read, shown_text, stamp
from ._gating import ToolGating, fold_into_state
from .state import PlanfenceState
from .store import PlanfenceStore, ReadLog, track_reads

ModelResult = ModelResponse[Any] | AIMessage | ExtendedModelResponse[Any]
Shown = list[Record] | PlanUnavailable
Seen = ReadSet | PlanUnavailable


class PlanfenceAgentState(AgentState[Any], PlanfenceState):
    """`create_agent` state with the planfence keys."""


class PlanfenceAgentMiddleware(ToolGating, AgentMiddleware[PlanfenceAgentState, Any]):
    """Stamps plans from what the model saw and gates every tool call.

    Args:
        store: the store: a `Store`, an `AsyncStore`, a URL or a `StoreBridge`.
        policy: the declared scopes (a `Policy`, its dict form, or TOML text).
        gate: a `Gate` configured beyond these settings (see `Adapter.attach_gate`).
        middleware: gate middleware, outermost first.
        audit: how the gate records its decisions (see `Adapter.attach_gate`).
        keys: keys whose current version is shown to the model on every call.
        prefixes: key prefixes shown the same way.
        reads: a `PlanfenceStore` whose reads by tools (and during model calls) join the plan's
            parents.
        agent: the agent id plans are stored under (`plans/<agent>`) and audited as.
    """

    state_schema = PlanfenceAgentState

    def __init__(
        self,
        store: AsyncStore | Store,
        policy: Policy | Mapping[str, Any] | str,
        *,
        keys: Iterable[str] = (),
        prefixes: Iterable[str] = (),
        reads: PlanfenceStore | None = None,
        agent: str = "agent",
        gate: Gate | None = None,
        middleware: Iterable[Middleware] = (),
        audit: AuditMode = DEFAULT_AUDIT,
        header: str = DEFAULT_HEADER,
    ) -> None:
        super().__init__()
        self._join_seam(
            store, policy, gate, agent, author=agent, middleware=middleware, audit=audit
        )
        self.keys = list(keys)
        self.prefixes = list(prefixes)
        self.reads = reads
        self.header = header
        self.tools = []

    # ---- per run

    def before_agent(self, state: PlanfenceAgentState, runtime: Runtime[Any]) -> dict[str, Any]:
        """A new request: a fresh replan budget, and no plan for the first one to supersede."""
        return {
            "planfence_plan": None,
            "planfence_replans": 0,
            "planfence_outcome": None,
            "planfence_verdicts": None,
            "planfence_unavailable": None,
        }

    async def abefore_agent(
        self, state: PlanfenceAgentState, runtime: Runtime[Any]
    ) -> dict[str, Any]:
        return self.before_agent(state, runtime)

    @hook_config(can_jump_to=["end"])
    def before_model(
        self, state: PlanfenceAgentState, runtime: Runtime[Any]
    ) -> dict[str, Any] | None:
        """Fold the last tool step's verdicts into the outcome; a block ends the run."""
        verdicts = state.get("planfence_verdicts") or []
        if not verdicts:
            return None
        outcome, update = fold_into_state(state, verdicts)
        update["planfence_verdicts"] = None
        if outcome is not None and outcome.status == REPLANNING:
            # The refusal showed what changed: the replan cites those versions, not older ones.
            tool_reads = state.get("planfence_tool_reads")
            update["planfence_tool_reads"] = Overwrite(refreshed(tool_reads, outcome.current))
        if outcome is not None and outcome.status == BLOCKED:
            update["jump_to"] = "end"
        return update

    @hook_config(can_jump_to=["end"])
    async def abefore_model(
        self, state: PlanfenceAgentState, runtime: Runtime[Any]
    ) -> dict[str, Any] | None:
        return self.before_model(state, runtime)

    # ---- model calls: show the records, stamp the plan

    def wrap_model_call(
        self,
        request: ModelRequest[Any],
        handler: Callable[[ModelRequest[Any]], ModelResponse[Any]],
    ) -> ModelResult:
        records = self.stamper.bridge.run(read, self.stamper, self.keys, self.prefixes)
        with track_reads() as log:
            response = handler(self._show(request, records))
        seen = self._seen(request, records, log)
        calls = _tool_calls(response)
        plan = None
        if calls:
            fields = self._plan_fields(request, calls)
            plan = self.stamper.bridge.run(stamp, self.stamper, seen, **fields)
        return self._extend(request, response, seen, plan)

    async def awrap_model_call(
        self,
        request: ModelRequest[Any],
        handler: Callable[[ModelRequest[Any]], Awaitable[ModelResponse[Any]]],
    ) -> ModelResult:
        records = await read(self.stamper, self.keys, self.prefixes)
        with track_reads() as log:
            response = await handler(self._show(request, records))
        seen = self._seen(request, records, log)
        calls = _tool_calls(response)
        plan = None
        if calls:
            fields = self._plan_fields(request, calls)
            plan = await stamp(self.stamper, seen, **fields)
        return self._extend(request, response, seen, plan)

    def _seen(self, request: ModelRequest[Any], records: Shown, log: ReadLog) -> Seen:
        """Every version this call could plan from: tools' reads in this run, reads during the
        call, and the records shown (or why they could not be read)."""
        if isinstance(records, PlanUnavailable):
            return records
        tool_reads = request.state.get("planfence_tool_reads")
        if not isinstance(tool_reads, Mapping):
            tool_reads = None
        return merge_reads(tool_reads, self._tool_reads(log), reads_of(records))

    def _tool_reads(self, log: ReadLog) -> ReadSet:
        return log.get(self.reads.bridge.aio) if self.reads is not None else {}

    def _show(self, request: ModelRequest[Any], records: Shown) -> ModelRequest[Any]:
        if not records:
            return request
        text = shown_text(self.header, records)
        if request.system_message is not None and request.system_message.text:
            text = f"{request.system_message.text}\n\n{text}"
        return request.override(system_message=SystemMessage(content=text))

    def _plan_fields(
        self, request: ModelRequest[Any], calls: list[dict[str, Any]]
    ) -> dict[str, Any]:
        """The run's chain lives in its state: the plan supersedes the run's previous one."""
        previous = request.state.get("planfence_plan")
        return {
            "value": {"agent": self.agent, "tool_calls": calls},
            "supersedes": previous if isinstance(previous, str) else None,
        }

    @staticmethod
    def _extend(
        request: ModelRequest[Any],
        response: ModelResult,
        seen: Seen,
        plan: str | PlanUnavailable | None,
    ) -> ModelResult:
        update: dict[str, Any] = {"planfence_unavailable": None}
        if not isinstance(seen, PlanUnavailable):
            update["planfence_reads"] = seen
        if isinstance(plan, PlanUnavailable):  # its calls are refused as store_unavailable
            update["planfence_unavailable"] = plan.error
        elif plan is not None:
            update["planfence_plan"] = plan
            if action_done(request.state.get("planfence_outcome")):
                # A new action: the previous one ended with a gated call allowed as current.
                # After ungated calls only, the count (and the gate's chain) carries on.
                update["planfence_replans"] = 0
        if isinstance(response, ExtendedModelResponse):
            inner = response.command
            if inner is not None and isinstance(inner.update, dict):
                update = {**inner.update, **update}
            return ExtendedModelResponse(response.model_response, Command(update=update))
        if isinstance(response, AIMessage):
            response = ModelResponse(result=[response])
        return ExtendedModelResponse(response, Command(update=update))


def _tool_calls(response: ModelResult) -> list[dict[str, Any]]:
    if isinstance(response, ExtendedModelResponse):
        response = response.model_response
    messages = [response] if isinstance(response, AIMessage) else response.result
    return [
        {"name": c["name"], "args": c["args"]}
        for m in messages
        if isinstance(m, AIMessage)
        for c in m.tool_calls
    ]
