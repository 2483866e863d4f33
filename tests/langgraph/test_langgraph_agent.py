"""End to end: `create_agent` with `PlanfenceAgentMiddleware` and a scripted model, sync and async.

The customer revises the trip requirements while the model is thinking, after it saw them: the
gate catches the stale plan, the model replans once and books the new destination; stale again
blocks the run; the freshness-only baseline books the stale destination.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest
from langchain.agents import create_agent
from langchain_core.messages import SystemMessage, ToolMessage
from langgraph_helpers import POLICY, REQ, Trip, book

from planfence.adapters.langgraph import PlanfenceAgentMiddleware
from planfence.demos.baselines import freshness_checker
from planfence.demos.executors import on_baseline
from planfence.plugins.gate import (
    CallNext,
    Judgement,
    Middleware,
    Refused,
    ToolCall,
    Verdict,
    find_decisions_sync,
)
from planfence.shared_memory import AsyncStore, Store, create_async_store, open_store

TASK = {"messages": [{"role": "user", "content": "Book the flight for trip 42."}]}


@pytest.fixture
def sync_store(tmp_path: Path) -> Iterator[Store]:
    with open_store(f"sqlite:///{tmp_path / 'pf.db'}") as store:
        yield store


@pytest.fixture(params=["memory", "sync-sqlite"])
async def any_store(
    request: pytest.FixtureRequest, tmp_path: Path
) -> AsyncIterator[AsyncStore | Store]:
    if request.param == "memory":
        store = create_async_store("memory://")
        await store.setup()
        yield store
        await store.aclose()
    else:
        sync = open_store(f"sqlite:///{tmp_path / 'pf.db'}")
        yield sync
        sync.close()


def agent_for(
    trip: Trip, store: AsyncStore | Store, answers: list[Any], revisions: dict[int, str], **kw: Any
) -> tuple[Any, Any, PlanfenceAgentMiddleware]:
    model = trip.model(answers, revisions)
    baseline = kw.pop("checker", None)
    fence = PlanfenceAgentMiddleware(store, POLICY, keys=[REQ], agent="booker", **kw)
    if baseline is not None:  # the control: a baseline judges instead of the gate
        on_baseline(fence.gate, baseline)
    return create_agent(model, [trip.tool], middleware=[fence]), model, fence


def refusals(state: dict[str, Any]) -> list[ToolMessage]:
    return [m for m in state["messages"] if isinstance(m, ToolMessage) and m.status == "error"]


def check_replanned(trip: Trip, state: dict[str, Any], model: Any, first: str) -> None:
    assert trip.booked == ["Porto"]  # the stale call never ran; the replanned one did
    assert state["planfence_outcome"]["status"] == "done"
    assert state["planfence_replans"] == 1
    [refusal] = refusals(state)
    assert f"{REQ} changed" in str(refusal.content) and "Porto" in str(refusal.content)
    # The model saw the current records on every call: Lisbon first, then Porto.
    shown = [str(p[0].content) for p in model.prompts if isinstance(p[0], SystemMessage)]
    assert "Lisbon" in shown[0] and "Porto" in shown[1]
    assert state["planfence_reads"] == {REQ: [trip.head()]}
    assert first != trip.head()


def test_sync_agent_replans_once_after_a_stale_plan(sync_store: Store) -> None:
    trip = Trip(sync_store)
    first = trip.put("Lisbon")
    agent, model, fence = agent_for(
        trip, sync_store, [book("Lisbon", 0), book("Porto", 1), "Booked Porto."], {0: "Porto"}
    )
    state = agent.invoke(TASK)
    check_replanned(trip, state, model, first)
    plan = sync_store.get(state["planfence_plan"])
    assert plan.parents == (trip.head(),)
    assert plan.supersedes is not None
    assert sync_store.get(plan.supersedes).parents == (first,)
    fence.close()  # writes the allows the gate's deferred audit queued
    verdicts = [d.verdict for d in find_decisions_sync(sync_store, source="gate")]
    assert sorted(verdicts) == ["allow", "replan"]


async def test_async_agent_replans_once_after_a_stale_plan(any_store: AsyncStore | Store) -> None:
    trip = Trip(any_store)
    first = trip.put("Lisbon")
    agent, model, _ = agent_for(
        trip, any_store, [book("Lisbon", 0), book("Porto", 1), "Booked Porto."], {0: "Porto"}
    )
    state = await agent.ainvoke(TASK)
    check_replanned(trip, state, model, first)


def test_sync_agent_stale_again_is_blocked(sync_store: Store) -> None:
    trip = Trip(sync_store)
    trip.put("Lisbon")
    agent, model, _ = agent_for(
        trip,
        sync_store,
        [book("Lisbon", 0), book("Porto", 1), "Booked."],
        {0: "Porto", 1: "Madrid"},
    )
    state = agent.invoke(TASK)
    assert trip.booked == []
    outcome = state["planfence_outcome"]
    assert (outcome["status"], outcome["reason"], outcome["stale"]) == (
        "blocked",
        "stale_after_replan",
        [REQ],
    )
    assert len(model.prompts) == 2  # the run ended at the block: no third model call
    assert "planfence blocked book_flight" in str(state["messages"][-1].content)


async def test_async_agent_stale_again_is_blocked(any_store: AsyncStore | Store) -> None:
    trip = Trip(any_store)
    trip.put("Lisbon")
    agent, model, _ = agent_for(
        trip,
        any_store,
        [book("Lisbon", 0), book("Porto", 1), "Booked."],
        {0: "Porto", 1: "Madrid"},
    )
    state = await agent.ainvoke(TASK)
    assert trip.booked == []
    assert state["planfence_outcome"]["status"] == "blocked"
    assert len(model.prompts) == 2


def test_sync_freshness_only_baseline_books_the_stale_destination(sync_store: Store) -> None:
    """The control: same agent and revision, a checker that only keeps state fresh."""
    trip = Trip(sync_store)
    trip.put("Lisbon")
    agent, _, _ = agent_for(
        trip, sync_store, [book("Lisbon", 0), "Booked."], {0: "Porto"}, checker=freshness_checker
    )
    state = agent.invoke(TASK)
    assert trip.booked == ["Lisbon"]
    assert state["planfence_outcome"]["status"] == "done"


async def test_async_freshness_only_baseline_books_the_stale_destination(
    any_store: AsyncStore | Store,
) -> None:
    trip = Trip(any_store)
    trip.put("Lisbon")
    agent, _, _ = agent_for(
        trip, any_store, [book("Lisbon", 0), "Booked."], {0: "Porto"}, checker=freshness_checker
    )
    await agent.ainvoke(TASK)
    assert trip.booked == ["Lisbon"]


def test_current_plan_runs_first_time(sync_store: Store) -> None:
    trip = Trip(sync_store)
    trip.put("Lisbon")
    agent, _, _ = agent_for(trip, sync_store, [book("Lisbon", 0), "Booked."], {})
    state = agent.invoke(TASK)
    assert trip.booked == ["Lisbon"]
    assert (state["planfence_outcome"]["status"], state["planfence_replans"]) == ("done", 0)


class Budget(Middleware):
    """A user's own middleware around the gate: counts calls and refuses past a budget."""

    def __init__(self, calls: int) -> None:
        self.left = calls
        self.seen: list[str] = []

    async def on_call_tool(self, call: ToolCall, call_next: CallNext) -> Judgement:
        self.seen.append(call.tool)
        if self.left <= 0:
            return Refused(Verdict("block", "over_budget", call.tool, call.plan, call.agent))
        self.left -= 1
        return await call_next(call)


@pytest.mark.parametrize("run", ["invoke", "ainvoke"])
async def test_user_middleware_wraps_every_tool_call(sync_store: Store, run: str) -> None:
    trip = Trip(sync_store)
    trip.put("Lisbon")
    budget = Budget(calls=0)
    agent, _, _ = agent_for(trip, sync_store, [book("Lisbon", 0), "Done."], {}, middleware=[budget])
    state = agent.invoke(TASK) if run == "invoke" else await agent.ainvoke(TASK)
    assert budget.seen == ["book_flight"] and trip.booked == []
    assert state["planfence_outcome"]["status"] == "blocked"
    assert state["planfence_outcome"]["reason"] == "over_budget"
