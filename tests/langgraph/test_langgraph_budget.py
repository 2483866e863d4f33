"""The one-replan budget holds through steps of ungated calls, and starts afresh only after a
gated call was allowed under a current plan: every plan supersedes the run's previous one."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from langchain.agents import create_agent
from langchain_core.messages import AIMessage, SystemMessage
from langchain_core.runnables import RunnableConfig
from langchain_core.tools import tool
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.constants import END, START
from langgraph.graph import MessagesState, StateGraph
from langgraph_helpers import POLICY, REQ, Trip, book

from planfence.adapters.langgraph import (
    PlanfenceAgentMiddleware,
    PlanfenceState,
    PlanfenceStore,
    PlanfenceToolNode,
)
from planfence.plugins.gate import find_decisions_sync
from planfence.shared_memory import Store, open_store

TASK = {"messages": [{"role": "user", "content": "Book the flight for trip 42."}]}
WEATHER_POLICY = POLICY.declare("weather", ungated=True)


@tool
def weather(city: str) -> str:
    """The weather forecast (read-only)."""
    return f"sunny in {city}"


def look(n: int) -> AIMessage:
    return AIMessage(
        content="", tool_calls=[{"name": "weather", "args": {"city": "Porto"}, "id": f"w{n}"}]
    )


class State(MessagesState, PlanfenceState):
    pass


@pytest.fixture
def sync_store(tmp_path: Path) -> Iterator[Store]:
    with open_store(f"sqlite:///{tmp_path / 'pf.db'}") as store:
        yield store


def chain(store: Store, plan_id: str) -> list[str]:
    """The plan ids from `plan_id` back along `supersedes`, newest first."""
    ids = [plan_id]
    while (previous := store.get(ids[-1]).supersedes) is not None:
        ids.append(previous)
    return ids


def plan_ids(store: Store) -> list[str]:
    """Every plan the gate judged, in the order of the decisions (by time: a deferred allow is
    written after the refusals that followed it, with the time it was decided)."""
    decisions = sorted(find_decisions_sync(store, source="gate"), key=lambda d: (d.at, d.id or 0))
    return list(dict.fromkeys(d.plan for d in decisions if d.plan))


def graph_for(
    trip: Trip, store: Store, answers: list[Any], revisions: dict[int, str]
) -> tuple[Any, Any, PlanfenceToolNode]:
    model = trip.model(answers, revisions)
    reader = PlanfenceStore(store)
    # `proceed="planner"`: after calls that ran, the planner plans the next step of the task.
    fence = PlanfenceToolNode(store, WEATHER_POLICY, planner="planner", proceed="planner")

    def planner(state: State) -> dict[str, Any]:
        item = reader.get(("trip", "42"), "requirements")
        assert item is not None
        reply = model.invoke([SystemMessage(f"requirements: {item.value}"), *state["messages"]])
        if not isinstance(reply, AIMessage) or not reply.tool_calls:
            return {"messages": [reply]}
        return {"messages": [reply], **fence.stamp(state, reader.take_reads())}

    async def aplanner(state: State) -> dict[str, Any]:
        item = await reader.aget(("trip", "42"), "requirements")
        assert item is not None
        prompt = [SystemMessage(f"requirements: {item.value}"), *state["messages"]]
        reply = await model.ainvoke(prompt)
        if not isinstance(reply, AIMessage) or not reply.tool_calls:
            return {"messages": [reply]}
        return {"messages": [reply], **await fence.astamp(state, reader.take_reads())}

    def next_step(state: State) -> str:
        last = state["messages"][-1]
        return "tools" if isinstance(last, AIMessage) and last.tool_calls else END

    graph = StateGraph(State)
    graph.add_node("planner", planner)
    graph.add_node("aplanner", aplanner)
    graph.add_node("tools", fence.tool_node([trip.tool, weather]), destinations=fence.destinations)
    return graph, next_step, fence


def compiled(graph: Any, next_step: Any, planner: str) -> Any:
    if planner == "aplanner":
        graph.nodes["planner"] = graph.nodes["aplanner"]
    del graph.nodes["aplanner"]
    graph.add_edge(START, "planner")
    graph.add_conditional_edges("planner", next_step, ["tools", END])
    return graph.compile()


# book(Lisbon) is stale (Porto now) -> replan; the replan only looks up the weather (ungated,
# allowed); book(Porto) is stale again (Madrid now): the replan was spent, so it is blocked.
SCRIPT = [book("Lisbon", 0), look(1), book("Porto", 2), book("Madrid", 3), "Done."]
REVISIONS = {0: "Porto", 2: "Madrid"}


def check_blocked_after_ungated_step(store: Store, trip: Trip, state: dict[str, Any]) -> None:
    assert trip.booked == []
    outcome = state["planfence_outcome"]
    assert (outcome["status"], outcome["reason"]) == ("blocked", "stale_after_replan")
    assert state["planfence_replans"] == 1  # the weather step did not reset it
    # Every plan supersedes the one before it, the weather plan included.
    plans = plan_ids(store)
    assert len(plans) == 3
    assert chain(store, state["planfence_plan"]) == plans[::-1]


@pytest.mark.parametrize("planner", ["planner", "aplanner"])
async def test_graph_ungated_step_does_not_renew_the_replan(
    planner: str, sync_store: Store
) -> None:
    trip = Trip(sync_store)
    trip.put("Lisbon")
    graph, next_step, fence = graph_for(trip, sync_store, SCRIPT, REVISIONS)
    app = compiled(graph, next_step, planner)
    state = app.invoke(TASK) if planner == "planner" else await app.ainvoke(TASK)
    await fence.aclose()  # writes the allows the gate's deferred audit queued
    check_blocked_after_ungated_step(sync_store, trip, state)


def test_graph_gated_allow_starts_a_fresh_budget(sync_store: Store) -> None:
    """Two actions in one run: each gets its one replan."""
    trip = Trip(sync_store)
    trip.put("Lisbon")
    script = [book("Lisbon", 0), book("Porto", 1), book("Porto", 2), book("Madrid", 3), "Done."]
    graph, next_step, _ = graph_for(trip, sync_store, script, {0: "Porto", 2: "Madrid"})
    state = compiled(graph, next_step, "planner").invoke(TASK)
    assert trip.booked == ["Porto", "Madrid"]
    assert (state["planfence_outcome"]["status"], state["planfence_replans"]) == ("done", 1)
    assert len(chain(sync_store, state["planfence_plan"])) == 4


def agent_for(
    trip: Trip, store: Store, answers: list[Any], revisions: dict[int, str]
) -> tuple[Any, PlanfenceAgentMiddleware]:
    model = trip.model(answers, revisions)
    fence = PlanfenceAgentMiddleware(store, WEATHER_POLICY, keys=[REQ], agent="booker")
    return create_agent(model, [trip.tool, weather], middleware=[fence]), fence


@pytest.mark.parametrize("use_async", [False, True])
async def test_agent_ungated_step_does_not_renew_the_replan(
    use_async: bool, sync_store: Store
) -> None:
    trip = Trip(sync_store)
    trip.put("Lisbon")
    agent, fence = agent_for(trip, sync_store, SCRIPT, REVISIONS)
    state = await agent.ainvoke(TASK) if use_async else agent.invoke(TASK)
    fence.close()  # writes the allows the gate's deferred audit queued
    check_blocked_after_ungated_step(sync_store, trip, state)


def test_agent_gated_allow_starts_a_fresh_budget(sync_store: Store) -> None:
    trip = Trip(sync_store)
    trip.put("Lisbon")
    script = [book("Lisbon", 0), book("Porto", 1), book("Porto", 2), book("Madrid", 3), "Done."]
    agent, _ = agent_for(trip, sync_store, script, {0: "Porto", 2: "Madrid"})
    state = agent.invoke(TASK)
    assert trip.booked == ["Porto", "Madrid"]
    assert (state["planfence_outcome"]["status"], state["planfence_replans"]) == ("done", 1)


def test_agent_new_invocation_supersedes_nothing(sync_store: Store) -> None:
    """A new request in a checkpointed thread starts its own chain: the earlier request that
    ended blocked does not spend the new one's replan."""
    trip = Trip(sync_store)
    trip.put("Lisbon")
    script = [book("Lisbon", 0), book("Porto", 1), book("Madrid", 2), book("Rome", 3), "Done."]
    model = trip.model(script, {0: "Porto", 1: "Madrid", 2: "Rome"})
    fence = PlanfenceAgentMiddleware(sync_store, WEATHER_POLICY, keys=[REQ], agent="booker")
    agent = create_agent(model, [trip.tool], middleware=[fence], checkpointer=InMemorySaver())
    config: RunnableConfig = {"configurable": {"thread_id": "t"}}
    first = agent.invoke(TASK, config)
    assert first["planfence_outcome"]["status"] == "blocked"
    second = agent.invoke(TASK, config)
    assert trip.booked == ["Rome"]  # its own one replan
    assert second["planfence_outcome"]["status"] == "done"
    fence.close()  # writes the allows the gate's deferred audit queued
    assert chain(sync_store, second["planfence_plan"]) == plan_ids(sync_store)[-2:][::-1]
