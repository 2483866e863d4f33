"""Framework-free pieces of the LangGraph adapter: reaching the store from sync and async code,
checkers, refusal text, and the verdict summaries a fenced graph keeps in its state."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from planfence.plugins.gate import (
    ALLOW,
    BLOCK,
    REPLAN,
    CheckerFactory,
    GuardedExecutor,
    Policy,
    Verdict,
    checker_factory,
    fail_closed,
)
from planfence.plugins.gate.decision import CURRENT
from planfence.shared_memory import AsyncStore, StoreBridge


class Checkers:
    """One checker per store object (the gate, unless an experiment supplies a factory)."""

    def __init__(
        self, factory: CheckerFactory | str | None, policy: Policy, agent: str | None
    ) -> None:
        self.factory = checker_factory(factory)
        self.policy = policy
        self.agent = agent
        self._by_store: dict[int, tuple[AsyncStore, GuardedExecutor]] = {}

    def for_store(self, store: AsyncStore) -> GuardedExecutor:
        hit = self._by_store.get(id(store))
        if hit is None or hit[0] is not store:
            checker = self.factory(store, self.policy, self.agent)
            hit = self._by_store[id(store)] = (store, checker)
        return hit[1]

    def judge(
        self, tool: str, args: Mapping[str, Any], plan_id: Any
    ) -> Callable[[AsyncStore], Awaitable[Verdict]]:
        async def run(store: AsyncStore) -> Verdict:
            return await self.for_store(store).check(tool, args, plan_id, agent=self.agent)

        return run

    def failed(self, tool: str, plan_id: Any, exc: BaseException) -> Verdict:
        """Fail closed when the check itself could not run."""
        return fail_closed(tool, plan_id, self.agent, exc)


def call_of(request: Any) -> tuple[str, dict[str, Any], Any]:
    """Tool name, arguments and the plan a `ToolCallRequest` acts under (from graph state)."""
    state = request.state if isinstance(request.state, Mapping) else {}
    call = request.tool_call
    return call["name"], dict(call.get("args") or {}), state.get("planfence_plan")


def judge_call(bridge: StoreBridge, checkers: Checkers, request: Any) -> Verdict:
    """The verdict for a tool call request, from sync code; blocks when the check cannot run."""
    name, args, plan = call_of(request)
    try:
        return bridge.call(checkers.judge(name, args, plan))
    except Exception as exc:
        return checkers.failed(name, plan, exc)


async def ajudge_call(bridge: StoreBridge, checkers: Checkers, request: Any) -> Verdict:
    """`judge_call` for async code."""
    name, args, plan = call_of(request)
    try:
        return await bridge.acall(checkers.judge(name, args, plan))
    except Exception as exc:
        return checkers.failed(name, plan, exc)


def summary(v: Verdict) -> dict[str, Any]:
    """The JSON-able part of a verdict kept in graph state."""
    return {
        "verdict": v.verdict,
        "reason": v.reason,
        "tool": v.tool,
        "plan": v.plan,
        "stale": [s.key for s in v.stale],
        "current": {s.key: s.current for s in v.stale},  # the heads the refusal showed
    }


def outcome_of(summaries: list[dict[str, Any]]) -> dict[str, Any] | None:
    """Fold one step's verdicts: blocked beats replan beats done.

    `gated` says whether a gated call was allowed because its plan was current (reason
    "current"): only that ends an action's replan budget. Ungated calls (read-only tools) leave
    the budget where it was, so a replan cannot be renewed by looking up the weather.
    """
    gated = any(s["verdict"] == ALLOW and s.get("reason") == CURRENT for s in summaries)
    for kind, status in ((BLOCK, "blocked"), (REPLAN, "replan"), (ALLOW, "done")):
        hit = next((s for s in summaries if s["verdict"] == kind), None)
        if hit is not None:
            fields = ("tool", "reason", "plan", "stale", "current")
            return {"status": status, "gated": gated, **{k: hit.get(k) for k in fields}}
    return None


def gated_done(outcome: object) -> bool:
    """The step before ran its calls and at least one of them was gated (and allowed as
    current): the action is over and the next plan starts a fresh replan budget."""
    if not isinstance(outcome, Mapping):
        return False
    return outcome.get("status") == "done" and bool(outcome.get("gated"))
