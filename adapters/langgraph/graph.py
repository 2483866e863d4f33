"""PlanFence for hand-written LangGraph graphs: a planner node stamps plans, a `ToolNode` gates.

    fence = GraphFence(store, policy, planner="planner", proceed="report")
    def planner(state):  ...  return {"messages": [...], **fence.stamp(state, reads)}
    builder.add_node("tools", fence.tool_node([book_flight]), destinations=fence.destinations)

The tool node routes itself with `Command(goto=...)` (give it no static outgoing edge): on to
`proceed` when the call ran, back to the planner on the first refusal, to the end when blocked.
The plan id and the replan count live in graph state (`PlanfenceState`).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any

from planfence.plugins.gate import REPLAN, Policy, Verdict, create_plan
from planfence.shared_memory import JSON, AsyncStore, MissingExtraError, Record, Store

try:
    from langchain_core.messages import ToolMessage
    from langchain_core.tools import BaseTool
    from langgraph.constants import END
    from langgraph.prebuilt import ToolNode
    from langgraph.prebuilt.tool_node import ToolCallRequest
    from langgraph.types import Command
except ImportError as exc:  # pragma: no cover - exercised in a subprocess test
    raise MissingExtraError("planfence.adapters.langgraph", "langgraph") from exc

from ._fence import CheckerKind, Checkers, StoreBridge, coerce_policy, summary
from .middleware import refusal_message


class GraphFence:
    """The gate for a hand-written graph's tool node, and plan stamping for its planner node.

    Args:
        store: a sync `Store` (sync and async graphs) or an `AsyncStore`.
        policy: the declared scopes (a `Policy`, its dict form, or TOML text).
        planner: the node that receives a refusal for its one replan.
        proceed: where the graph goes after a call ran (default: the end).
        agent: the executor id written to the audit log.
        checker: "planfence" (the gate) or "freshness" (the baseline that acts on stale plans).
    """

    def __init__(
        self,
        store: AsyncStore | Store,
        policy: Policy | Mapping[str, Any] | str,
        *,
        planner: str,
        proceed: str = END,
        agent: str = "executor",
        checker: CheckerKind = "planfence",
    ) -> None:
        self.bridge = StoreBridge(store)
        self.policy = coerce_policy(policy)
        self.planner = planner
        self.proceed = proceed
        self.agent = agent
        self.checkers = Checkers(checker, self.policy, agent)

    @property
    def destinations(self) -> tuple[str, ...]:
        """Pass to `add_node(..., destinations=...)` for the tool node."""
        return tuple(dict.fromkeys((self.proceed, self.planner, END)))

    # ---- the planner side

    def stamp(
        self,
        state: Mapping[str, Any],
        reads: Mapping[str, str],
        *,
        author: str | None = None,
        value: JSON = None,
    ) -> dict[str, Any]:
        """Store a plan derived from `reads` (key -> record id); returns the state update."""
        record = self.bridge.call(self._plan_fn(state, reads, author, value))
        return self._stamped(state, reads, record)

    async def astamp(
        self,
        state: Mapping[str, Any],
        reads: Mapping[str, str],
        *,
        author: str | None = None,
        value: JSON = None,
    ) -> dict[str, Any]:
        record = await self.bridge.acall(self._plan_fn(state, reads, author, value))
        return self._stamped(state, reads, record)

    def _plan_fn(
        self, state: Mapping[str, Any], reads: Mapping[str, str], author: str | None, value: JSON
    ) -> Callable[[AsyncStore], Awaitable[Record]]:
        supersedes = state.get("planfence_plan") if _replanning(state) else None
        parents = list(reads.values())

        async def run(store: AsyncStore) -> Record:
            return await create_plan(
                store,
                author=author or self.planner,
                parents=parents,
                value=value,
                supersedes=supersedes,
            )

        return run

    @staticmethod
    def _stamped(
        state: Mapping[str, Any], reads: Mapping[str, str], record: Record
    ) -> dict[str, Any]:
        return {
            "planfence_plan": record.id,
            "planfence_reads": dict(reads),
            "planfence_replans": state.get("planfence_replans", 0) if _replanning(state) else 0,
            "planfence_outcome": None,
        }

    # ---- the tool side

    def tool_node(self, tools: Sequence[BaseTool | Callable[..., Any]], **kwargs: Any) -> ToolNode:
        """A `ToolNode` whose every call goes through this fence."""
        return ToolNode(
            list(tools),
            wrap_tool_call=self.wrap_tool_call,
            awrap_tool_call=self.awrap_tool_call,
            **kwargs,
        )

    def wrap_tool_call(
        self,
        request: ToolCallRequest,
        handler: Callable[[ToolCallRequest], ToolMessage | Command[Any]],
    ) -> ToolMessage | Command[Any]:
        name, args, plan = self._call_of(request)
        try:
            verdict = self.bridge.call(self.checkers.judge(name, args, plan))
        except Exception as exc:
            verdict = self.checkers.failed(name, plan, exc)
        return self.route(request, verdict, handler(request) if verdict.allowed else None)

    async def awrap_tool_call(
        self,
        request: ToolCallRequest,
        handler: Callable[[ToolCallRequest], Awaitable[ToolMessage | Command[Any]]],
    ) -> ToolMessage | Command[Any]:
        name, args, plan = self._call_of(request)
        try:
            verdict = await self.bridge.acall(self.checkers.judge(name, args, plan))
        except Exception as exc:
            verdict = self.checkers.failed(name, plan, exc)
        return self.route(request, verdict, await handler(request) if verdict.allowed else None)

    @staticmethod
    def _call_of(request: ToolCallRequest) -> tuple[str, dict[str, Any], Any]:
        state = request.state if isinstance(request.state, Mapping) else {}
        call = request.tool_call
        return call["name"], dict(call.get("args") or {}), state.get("planfence_plan")

    def route(
        self,
        request: ToolCallRequest,
        verdict: Verdict,
        result: ToolMessage | Command[Any] | None = None,
    ) -> ToolMessage | Command[Any]:
        """Where the graph goes after a verdict: on, back to the planner once, or to the end.

        A refusal after the replan already spent on this action blocks, whatever the checker
        says: the second refusal ends the run.
        """
        state = request.state if isinstance(request.state, Mapping) else {}
        replans = int(state.get("planfence_replans", 0) or 0)
        note = summary(verdict)
        if verdict.allowed:
            if isinstance(result, Command):
                return result  # the tool routes itself
            messages = [result] if result is not None else []
            outcome = {"status": "done", **_detail(note)}
            return Command(
                goto=self.proceed,
                update={
                    "messages": messages,
                    "planfence_outcome": outcome,
                    "planfence_verdicts": [note],
                },
            )
        message = refusal_message(request, verdict)
        if verdict.verdict == REPLAN and replans < 1:
            return Command(
                goto=self.planner,
                update={
                    "messages": [message],
                    "planfence_replans": replans + 1,
                    "planfence_outcome": {"status": "replan", **_detail(note)},
                    "planfence_verdicts": [note],
                },
            )
        return Command(
            goto=END,
            update={
                "messages": [message],
                "planfence_outcome": {"status": "blocked", **_detail(note)},
                "planfence_verdicts": [note],
            },
        )


def _replanning(state: Mapping[str, Any]) -> bool:
    outcome = state.get("planfence_outcome") or {}
    return bool(outcome.get("status") == "replan" and state.get("planfence_plan"))


def _detail(note: Mapping[str, Any]) -> dict[str, Any]:
    return {k: note[k] for k in ("tool", "reason", "plan", "stale")}
