"""PlanFence for hand-written LangGraph graphs: a planner node stamps plans, a tool node gates.

    fence = PlanfenceToolNode(store, policy, planner="planner", proceed="report")
    def planner(state):  ...  return {"messages": [...], **fence.stamp(state, reads)}
    builder.add_node("tools", fence.tool_node([book_flight]), destinations=fence.destinations)

The tool node routes itself with `Command(goto=...)` (give it no static outgoing edge), once per
step whatever the number of parallel calls: to the end when any call was blocked, back to the
planner for its one replan when any call was refused, on to `proceed` when all of them ran. The
plan id, the replan count and what tools read live in graph state (`PlanfenceState`).

Every plan stamped supersedes the run's previous plan (`planfence_plan`), whatever happened to
it: the gate follows that chain back through plans that made no gated call, so a step of
ungated calls (a weather lookup) between a refusal and the next plan does not renew the one
replan. For the same reason the replan count is reset only once a gated call was allowed under
a current plan. A graph with a checkpointer carries both across invocations of one thread; a new
request that should start afresh passes `PlanfenceToolNode.NEW_REQUEST` in its input.

A plan that cannot be stamped because the store cannot be reached is no exception in the planner
node: `stamp` returns an update whose tool calls the tool node refuses as `store_unavailable`
(the run then ends). Reads through a `PlanfenceStore` raise `StoreUnavailableError` as any
store's would: a planner node that shows the model what it read says so when they fail.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import replace
from typing import Any

from planfence.plugins.gate import DEFAULT_AUDIT, AuditMode, Gate, Middleware, Policy
from planfence.plugins.gate.outage import PlanUnavailable
from planfence.plugins.gate.reads import ReadSet, merge_reads, refreshed
from planfence.plugins.gate.steps import DONE, REPLANNING, action_done
from planfence.shared_memory import JSON, AsyncStore, Store
from planfence.shared_memory.extras import extra_imports

with extra_imports("langgraph", "planfence.adapters.langgraph"):
    from langchain_core.runnables import RunnableConfig, RunnableLambda
    from langchain_core.tools import BaseTool
    from langgraph.constants import END
    from langgraph.prebuilt import ToolNode
    from langgraph.types import Command, Overwrite

from ..base import stamp
from ._gating import ToolGating, fold_into_state


class PlanfenceToolNode(ToolGating):
    """The gate for a hand-written graph's tool node, and plan stamping for its planner node.

    Args:
        store: the store: a `Store`, an `AsyncStore`, a URL or a `StoreBridge`.
        policy: the declared scopes (a `Policy`, its dict form, or TOML text).
        gate: a `Gate` configured beyond these settings (see `Adapter.attach_gate`).
        middleware: gate middleware, outermost first.
        audit: how the gate records its decisions (see `Adapter.attach_gate`).
        planner: the node that receives a refusal for its one replan.
        proceed: where the graph goes after a call ran (default: the end).
        agent: the executor id written to the audit log.
    """

    def __init__(
        self,
        store: AsyncStore | Store,
        policy: Policy | Mapping[str, Any] | str,
        *,
        planner: str,
        proceed: str = END,
        agent: str = "executor",
        gate: Gate | None = None,
        middleware: Iterable[Middleware] = (),
        audit: AuditMode = DEFAULT_AUDIT,
    ) -> None:
        self._join_seam(
            store, policy, gate, agent, author=planner, middleware=middleware, audit=audit
        )
        self.planner = planner
        self.proceed = proceed

    NEW_REQUEST: Mapping[str, Any] = {
        "planfence_plan": None,
        "planfence_replans": 0,
        "planfence_outcome": None,
    }
    """Input keys that start a new action with a fresh replan budget in a checkpointed thread:
    `graph.invoke({"messages": [...], **PlanfenceToolNode.NEW_REQUEST}, config)`."""

    @property
    def destinations(self) -> tuple[str, ...]:
        """Pass to `add_node(..., destinations=...)` for the tool node."""
        return tuple(dict.fromkeys((self.proceed, self.planner, END)))

    # ---- the planner side

    def stamp(
        self,
        state: Mapping[str, Any],
        reads: Mapping[str, str | Sequence[str]],
        *,
        author: str | None = None,
        value: JSON = None,
    ) -> dict[str, Any]:
        """Store a plan derived from `reads` (key -> record id or ids, e.g. a `PlanfenceStore`'s
        `take_reads()`) and what tools read in this run; returns the state update."""
        return self.stamper.bridge.run(self.astamp, state, reads, author=author, value=value)

    async def astamp(
        self,
        state: Mapping[str, Any],
        reads: Mapping[str, str | Sequence[str]],
        *,
        author: str | None = None,
        value: JSON = None,
    ) -> dict[str, Any]:
        cited = self._cited(state, reads)
        supersedes = _previous_plan(state)
        plan = await stamp(self.stamper, cited, value=value, supersedes=supersedes, author=author)
        if isinstance(plan, PlanUnavailable):  # the tool node refuses its calls
            return {"planfence_unavailable": plan.error, "planfence_verdicts": None}
        return self._stamped(state, cited, plan)

    @staticmethod
    def _cited(state: Mapping[str, Any], reads: Mapping[str, str | Sequence[str]]) -> ReadSet:
        return merge_reads(_tool_reads(state), reads)

    @staticmethod
    def _stamped(state: Mapping[str, Any], cited: ReadSet, plan: str) -> dict[str, Any]:
        replanning = _refused_plan(state) is not None
        spent = int(state.get("planfence_replans", 0) or 0)
        update: dict[str, Any] = {
            "planfence_plan": plan,
            "planfence_unavailable": None,
            "planfence_reads": cited,
            # Only a gated allow ends the action; ungated calls leave the count where it was.
            "planfence_replans": 0 if action_done(state.get("planfence_outcome")) else spent,
            "planfence_outcome": None,
            "planfence_verdicts": None,
        }
        if replanning:
            update["planfence_tool_reads"] = Overwrite(_tool_reads(state))
        return update

    # ---- the tool side

    def tool_node(
        self, tools: Sequence[BaseTool | Callable[..., Any]], **kwargs: Any
    ) -> RunnableLambda[Any, Any]:
        """A tool node whose every call goes through this fence and whose step routes once.

        `kwargs` go to the `ToolNode` that runs the calls.
        """
        inner = ToolNode(
            list(tools),
            wrap_tool_call=self.wrap_tool_call,
            awrap_tool_call=self.awrap_tool_call,
            **kwargs,
        )

        def step(state: Any, config: RunnableConfig) -> Any:
            return self.route_step(state, inner.invoke(state, config))

        async def astep(state: Any, config: RunnableConfig) -> Any:
            return self.route_step(state, await inner.ainvoke(state, config))

        return RunnableLambda(step, afunc=astep, name=inner.name)

    def route_step(self, state: Any, output: Any) -> Any:
        """Fold the verdicts of one tool step and send the graph on exactly once.

        Blocked beats replan beats done. A refusal after the replan already spent on this action
        blocks, whatever the gate says: the second refusal ends the run.
        """
        outputs = list(output) if isinstance(output, list) else [output]
        notes = [
            note
            for o in outputs
            if isinstance(o, Command) and isinstance(o.update, dict)
            for note in o.update.get("planfence_verdicts", [])
        ]
        outcome, update = fold_into_state(state, notes)
        if outcome is None:
            return output  # no gated call answered in this graph: nothing to route
        if outcome.status == DONE:
            if any(_routes_itself(o) for o in outputs):
                return [*outputs, Command(update=update)]
            return [*outputs, Command(goto=self.proceed, update=update)]
        # Refused: no call of this step may send the graph anywhere else.
        outputs = [replace(o, goto=()) if _routes_itself(o) else o for o in outputs]
        if outcome.status == REPLANNING:
            return [*outputs, Command(goto=self.planner, update=update)]
        return [*outputs, Command(goto=END, update=update)]


def _routes_itself(output: Any) -> bool:
    return isinstance(output, Command) and output.graph is None and bool(output.goto)


def _tool_reads(state: Mapping[str, Any]) -> ReadSet:
    """What tools read in this run; after a refusal, the changed keys' versions it showed take
    the place of those read before."""
    reads = state.get("planfence_tool_reads")
    reads = reads if isinstance(reads, Mapping) else {}
    if _refused_plan(state) is None:
        return merge_reads(reads)
    current = (state.get("planfence_outcome") or {}).get("current") or {}
    return refreshed(reads, current)


def _previous_plan(state: Mapping[str, Any]) -> str | None:
    """The plan the next one supersedes: the run's latest plan, refused or not."""
    plan = _refused_plan(state) or state.get("planfence_plan")
    return plan if isinstance(plan, str) else None


def _refused_plan(state: Mapping[str, Any]) -> str | None:
    """The plan the latest step refused for a replan, which the next plan supersedes."""
    outcome = state.get("planfence_outcome") or {}
    if outcome.get("status") != "replan":
        return None
    plan = outcome.get("plan") or state.get("planfence_plan")
    return plan if isinstance(plan, str) else None
