"""`PlanfenceMiddleware`: PlanFence inside `langchain.agents.create_agent`.

Each model call is shown the current public records (and anything its tools read through a
`PlanfenceStore`); when the model answers with tool calls, a plan is stamped whose parents are
exactly those record ids, superseding the previous plan. Every tool call is gated: a refusal comes
back to the model as an error `ToolMessage` naming the changed records, so it replans once; a
second refusal ends the run with `planfence_outcome["status"] == "blocked"`.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Iterable, Mapping
from typing import Any

from planfence.plugins.gate import Policy, Verdict, create_plan
from planfence.shared_memory import AsyncStore, MissingExtraError, Record, Store

try:
    from langchain.agents.middleware import AgentMiddleware, AgentState, hook_config
    from langchain.agents.middleware.types import (
        ExtendedModelResponse,
        ModelRequest,
        ModelResponse,
    )
    from langchain_core.messages import AIMessage, SystemMessage, ToolMessage
    from langgraph.prebuilt.tool_node import ToolCallRequest
    from langgraph.runtime import Runtime
    from langgraph.types import Command
except ImportError as exc:  # pragma: no cover - exercised in a subprocess test
    raise MissingExtraError("planfence.adapters.langgraph", "langgraph") from exc

from ._fence import (
    CheckerKind,
    Checkers,
    StoreBridge,
    coerce_policy,
    outcome_of,
    read_heads,
    records_text,
    refusal_text,
    summary,
)
from .state import PlanfenceState
from .store import PlanfenceStore

DEFAULT_HEADER = "Current public records (planfence shared memory); plan from these values:"
ModelResult = ModelResponse[Any] | AIMessage | ExtendedModelResponse[Any]


class PlanfenceAgentState(AgentState[Any], PlanfenceState):
    """`create_agent` state with the planfence keys."""


class PlanfenceMiddleware(AgentMiddleware[PlanfenceAgentState, Any]):
    """Stamps plans from what the model saw and gates every tool call.

    Args:
        store: a sync `Store` (sync and async agents) or an `AsyncStore`.
        policy: the declared scopes (a `Policy`, its dict form, or TOML text).
        keys: keys whose current version is shown to the model on every call.
        prefixes: key prefixes shown the same way.
        reads: a `PlanfenceStore` whose reads (by tools or nodes) join the plan's parents.
        agent: the agent id plans are stored under (`plans/<agent>`) and audited as.
        checker: "planfence" (the gate) or "freshness" (the baseline that acts on stale plans).
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
        checker: CheckerKind = "planfence",
        header: str = DEFAULT_HEADER,
    ) -> None:
        super().__init__()
        self.bridge = StoreBridge(store)
        self.policy = coerce_policy(policy)
        self.keys = list(keys)
        self.prefixes = list(prefixes)
        self.reads = reads
        self.agent = agent
        self.header = header
        self.checkers = Checkers(checker, self.policy, agent)
        self.tools = []

    # ---- per run

    def before_agent(self, state: PlanfenceAgentState, runtime: Runtime[Any]) -> dict[str, Any]:
        return {"planfence_replans": 0, "planfence_outcome": None, "planfence_verdicts": None}

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
        outcome = outcome_of(verdicts)
        update: dict[str, Any] = {"planfence_outcome": outcome, "planfence_verdicts": None}
        if outcome is not None and outcome["status"] == "replan":
            update["planfence_replans"] = state.get("planfence_replans", 0) + 1
        if outcome is not None and outcome["status"] == "blocked":
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
        records = self.bridge.call(lambda s: read_heads(s, self.keys, self.prefixes))
        seen = self._seen(request, records)
        response = handler(self._show(request, records))
        calls = _tool_calls(response)
        plan = None
        if calls:
            plan = self.bridge.call(self._plan_fn(request, seen, calls))
        return self._extend(response, seen, plan)

    async def awrap_model_call(
        self,
        request: ModelRequest[Any],
        handler: Callable[[ModelRequest[Any]], Awaitable[ModelResponse[Any]]],
    ) -> ModelResult:
        records = await self.bridge.acall(lambda s: read_heads(s, self.keys, self.prefixes))
        seen = self._seen(request, records)
        response = await handler(self._show(request, records))
        calls = _tool_calls(response)
        plan = None
        if calls:
            plan = await self.bridge.acall(self._plan_fn(request, seen, calls))
        return self._extend(response, seen, plan)

    def _seen(self, request: ModelRequest[Any], records: list[Record]) -> dict[str, str]:
        seen: dict[str, str] = {}
        previous = request.state.get("planfence_reads")
        if isinstance(previous, dict):
            seen.update(previous)
        if self.reads is not None:
            seen.update(self.reads.take_reads())
        seen.update({r.key: r.id for r in records})
        return seen

    def _show(self, request: ModelRequest[Any], records: list[Record]) -> ModelRequest[Any]:
        if not records:
            return request
        text = records_text(self.header, records)
        if request.system_message is not None and request.system_message.text:
            text = f"{request.system_message.text}\n\n{text}"
        return request.override(system_message=SystemMessage(content=text))

    def _plan_fn(
        self, request: ModelRequest[Any], seen: dict[str, str], calls: list[dict[str, Any]]
    ) -> Callable[[AsyncStore], Awaitable[Record]]:
        previous = request.state.get("planfence_plan")
        value = {"agent": self.agent, "tool_calls": calls}

        async def stamp(store: AsyncStore) -> Record:
            return await create_plan(
                store,
                author=self.agent,
                parents=list(seen.values()),
                value=value,
                supersedes=previous,
            )

        return stamp

    @staticmethod
    def _extend(response: ModelResult, seen: dict[str, str], plan: Record | None) -> ModelResult:
        update: dict[str, Any] = {"planfence_reads": seen}
        if plan is not None:
            update["planfence_plan"] = plan.id
        if isinstance(response, ExtendedModelResponse):
            inner = response.command
            if inner is not None and isinstance(inner.update, dict):
                update = {**inner.update, **update}
            return ExtendedModelResponse(response.model_response, Command(update=update))
        if isinstance(response, AIMessage):
            response = ModelResponse(result=[response])
        return ExtendedModelResponse(response, Command(update=update))

    # ---- tool calls: the gate

    def wrap_tool_call(
        self,
        request: ToolCallRequest,
        handler: Callable[[ToolCallRequest], ToolMessage | Command[Any]],
    ) -> ToolMessage | Command[Any]:
        name, args, plan = _call_of(request)
        try:
            verdict = self.bridge.call(self.checkers.judge(name, args, plan))
        except Exception as exc:
            verdict = self.checkers.failed(name, plan, exc)
        if not verdict.allowed:
            return _refusal(request, verdict)
        return _with_verdict(handler(request), verdict)

    async def awrap_tool_call(
        self,
        request: ToolCallRequest,
        handler: Callable[[ToolCallRequest], Awaitable[ToolMessage | Command[Any]]],
    ) -> ToolMessage | Command[Any]:
        name, args, plan = _call_of(request)
        try:
            verdict = await self.bridge.acall(self.checkers.judge(name, args, plan))
        except Exception as exc:
            verdict = self.checkers.failed(name, plan, exc)
        if not verdict.allowed:
            return _refusal(request, verdict)
        return _with_verdict(await handler(request), verdict)


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


def _call_of(request: ToolCallRequest) -> tuple[str, dict[str, Any], Any]:
    state = request.state if isinstance(request.state, Mapping) else {}
    call = request.tool_call
    return call["name"], dict(call.get("args") or {}), state.get("planfence_plan")


def refusal_message(request: ToolCallRequest, verdict: Verdict) -> ToolMessage:
    """The error `ToolMessage` the model reads when the gate refuses a call."""
    return ToolMessage(
        content=refusal_text(verdict),
        tool_call_id=request.tool_call["id"] or "",
        name=request.tool_call["name"],
        status="error",
        artifact={"planfence": summary(verdict)},
    )


def _refusal(request: ToolCallRequest, verdict: Verdict) -> Command[Any]:
    return Command(
        update={
            "messages": [refusal_message(request, verdict)],
            "planfence_verdicts": [summary(verdict)],
        }
    )


def _with_verdict(
    result: ToolMessage | Command[Any], verdict: Verdict
) -> ToolMessage | Command[Any]:
    if isinstance(result, ToolMessage):
        return Command(update={"messages": [result], "planfence_verdicts": [summary(verdict)]})
    if isinstance(result.update, dict) and result.goto == () and result.graph is None:
        log = [*result.update.get("planfence_verdicts", []), summary(verdict)]
        return Command(update={**result.update, "planfence_verdicts": log})
    return result
