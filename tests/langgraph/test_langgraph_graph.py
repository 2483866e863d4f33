"""A hand-written graph: planner node reading through `PlanfenceStore`, gated `ToolNode` routing
refusals back to the planner with `Command(goto=...)`, blocked runs to the end. Sync and async."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import pytest
from langchain_core.messages import AIMessage, SystemMessage
from langchain_core.tools import tool
from langgraph.constants import END, START
from langgraph.graph import MessagesState, StateGraph
from langgraph_helpers import POLICY, Trip, book

from planfence.adapters.langgraph import PlanfenceState, PlanfenceStore, PlanfenceToolNode
from planfence.demos.baselines import freshness_checker
from planfence.demos.executors import on_baseline
from planfence.shared_memory import AsyncStore, Store, create_async_store, open_store


class State(MessagesState, PlanfenceState):
    pass


TASK = {"messages": [{"role": "user", "content": "Book the flight for trip 42."}]}


def build(
    trip: Trip, store: AsyncStore | Store, calls: list[str], revisions: dict[int, str], **kw: Any
) -> tuple[Any, Any]:
    answers = [book(d, i) for i, d in enumerate(calls)]
    model = trip.model(answers, revisions)
    reader = PlanfenceStore(store)
    baseline = kw.pop("checker", None)
    fence = PlanfenceToolNode(store, POLICY, planner="planner", proceed="report", **kw)
    if baseline is not None:  # the control: a baseline judges instead of the gate
        on_baseline(fence.gate, baseline)

    def planner(state: State) -> dict[str, Any]:
        item = reader.get(("trip", "42"), "requirements")
        assert item is not None
        prompt = [SystemMessage(f"requirements: {item.value}"), *state["messages"]]
        return {"messages": [model.invoke(prompt)], **fence.stamp(state, reader.take_reads())}

    async def aplanner(state: State) -> dict[str, Any]:
        item = await reader.aget(("trip", "42"), "requirements")
        assert item is not None
        prompt = [SystemMessage(f"requirements: {item.value}"), *state["messages"]]
        reply = await model.ainvoke(prompt)
        return {"messages": [reply], **await fence.astamp(state, reader.take_reads())}

    def report(state: State) -> dict[str, Any]:
        return {"messages": [AIMessage(content="Trip booked.")]}

    graph = StateGraph(State)
    graph.add_node("planner", planner)
    graph.add_node("aplanner", aplanner)
    graph.add_node("tools", fence.tool_node([trip.tool]), destinations=fence.destinations)
    graph.add_node("report", report)
    return graph, model


def compile_graph(graph: StateGraph, planner: str) -> Any:
    # Both planner variants exist so sync and async runs share one builder; wire one of them.
    if planner == "aplanner":
        graph.nodes["planner"] = graph.nodes["aplanner"]
    del graph.nodes["aplanner"]
    graph.add_edge(START, "planner")
    graph.add_edge("planner", "tools")
    graph.add_edge("report", END)
    return graph.compile()


@pytest.fixture
def sync_store(tmp_path: Path) -> Iterator[Store]:
    with open_store(f"sqlite:///{tmp_path / 'pf.db'}") as store:
        yield store


def test_sync_graph_routes_one_refusal_to_the_planner(sync_store: Store) -> None:
    trip = Trip(sync_store)
    trip.put("Lisbon")
    graph, _ = build(trip, sync_store, ["Lisbon", "Porto"], {0: "Porto"})
    state = compile_graph(graph, "planner").invoke(TASK)
    assert trip.booked == ["Porto"]
    assert state["planfence_replans"] == 1
    assert state["planfence_outcome"]["status"] == "done"
    assert state["messages"][-1].content == "Trip booked."
    plan = sync_store.get(state["planfence_plan"])
    assert plan.parents == (trip.head(),) and plan.supersedes is not None


def test_sync_graph_stale_again_ends_blocked(sync_store: Store) -> None:
    trip = Trip(sync_store)
    trip.put("Lisbon")
    graph, _ = build(trip, sync_store, ["Lisbon", "Porto"], {0: "Porto", 1: "Madrid"})
    state = compile_graph(graph, "planner").invoke(TASK)
    assert trip.booked == []
    assert state["planfence_outcome"]["status"] == "blocked"
    assert state["planfence_outcome"]["reason"] == "stale_after_replan"
    assert "Trip booked." not in [m.content for m in state["messages"]]


def test_sync_graph_freshness_only_books_the_stale_destination(sync_store: Store) -> None:
    trip = Trip(sync_store)
    trip.put("Lisbon")
    graph, _ = build(trip, sync_store, ["Lisbon"], {0: "Porto"}, checker=freshness_checker)
    compile_graph(graph, "planner").invoke(TASK)
    assert trip.booked == ["Lisbon"]


@pytest.mark.parametrize("kind", ["memory", "sync-store"])
async def test_async_graph_replans_then_blocks_when_stale_again(kind: str, tmp_path: Path) -> None:
    store: AsyncStore | Store
    if kind == "memory":
        store = create_async_store("memory://")
        await store.setup()
    else:
        store = open_store(f"sqlite:///{tmp_path / 'pf.db'}")
    try:
        trip = Trip(store)
        trip.put("Lisbon")
        graph, _ = build(trip, store, ["Lisbon", "Porto"], {0: "Porto"})
        state = await compile_graph(graph, "aplanner").ainvoke(TASK)
        assert trip.booked == ["Porto"]
        assert state["planfence_replans"] == 1

        again = Trip(store)
        graph, _ = build(again, store, ["Porto", "Rome"], {0: "Rome", 1: "Madrid"})
        state = await compile_graph(graph, "aplanner").ainvoke(TASK)
        assert again.booked == []
        assert state["planfence_outcome"]["status"] == "blocked"

        control = Trip(store)
        graph, _ = build(control, store, ["Madrid"], {0: "Oslo"}, checker=freshness_checker)
        await compile_graph(graph, "aplanner").ainvoke(TASK)
        assert control.booked == ["Madrid"]
    finally:
        if isinstance(store, Store):
            store.close()
        else:
            await store.aclose()


HOTEL = "trip/42/hotel"


def parallel_graph(
    store: AsyncStore | Store, trip: Trip, answers: list[Any], revisions: dict[int, str]
) -> tuple[Any, list[str]]:
    """A planner whose model books the flight and the hotel in one message (two tool calls that
    run in one step); the flight depends on the requirements, the hotel on the hotel record."""
    policy = POLICY.declare("book_hotel", depends_on=[HOTEL])
    fence = PlanfenceToolNode(store, policy, planner="planner", proceed="report")
    reader = PlanfenceStore(store)
    hotels: list[str] = []
    model = trip.model(answers, revisions)

    @tool
    def book_hotel(city: str) -> str:
        """Book the trip's hotel."""
        hotels.append(city)
        return f"booked a hotel in {city}"

    async def planner(state: State) -> dict[str, Any]:
        await reader.aget(("trip", "42"), "requirements")
        await reader.aget(("trip", "42"), "hotel")
        reply = await model.ainvoke(state["messages"])
        return {"messages": [reply], **await fence.astamp(state, reader.take_reads())}

    def report(state: State) -> dict[str, Any]:
        return {"messages": [AIMessage(content="Trip booked.")]}

    graph = StateGraph(State)
    graph.add_node("planner", planner)
    tools = fence.tool_node([trip.tool, book_hotel])
    graph.add_node("tools", tools, destinations=fence.destinations)
    graph.add_node("report", report)
    graph.add_edge(START, "planner")
    graph.add_edge("planner", "tools")
    graph.add_edge("report", END)
    return graph.compile(), hotels


def flight_and_hotel(destination: str, n: int) -> AIMessage:
    return AIMessage(
        content="",
        tool_calls=[
            {"name": "book_flight", "args": {"destination": destination}, "id": f"f{n}"},
            {"name": "book_hotel", "args": {"city": "Lisbon"}, "id": f"h{n}"},
        ],
    )


@pytest.fixture
async def hotel_store() -> AsyncIterator[AsyncStore]:
    store = create_async_store("memory://")
    await store.setup()
    await store.own(HOTEL, "customer")
    await store.put(HOTEL, {"city": "Lisbon"}, author="customer")
    yield store
    await store.aclose()


async def test_parallel_calls_one_stale_route_once_to_the_planner(
    hotel_store: AsyncStore,
) -> None:
    """Flight stale, hotel current, in one step: the step goes back to the planner only (the
    hotel's "done" does not win), the new plan supersedes the refused one, and the report runs
    once, after the replanned flight."""
    trip = Trip(hotel_store)
    trip.put("Lisbon")
    answers = [flight_and_hotel("Lisbon", 0), book("Porto", 1)]
    graph, hotels = parallel_graph(hotel_store, trip, answers, {0: "Porto"})
    state = await graph.ainvoke(TASK)

    assert (trip.booked, hotels) == (["Porto"], ["Lisbon"])
    assert [m.content for m in state["messages"]].count("Trip booked.") == 1
    assert state["messages"][-1].content == "Trip booked."
    assert (state["planfence_outcome"]["status"], state["planfence_replans"]) == ("done", 1)
    plan = await hotel_store.get(state["planfence_plan"])
    assert plan.supersedes is not None
    refused = await hotel_store.get(plan.supersedes)
    assert refused.supersedes is None


async def test_parallel_calls_stale_again_after_the_replan_are_blocked(
    hotel_store: AsyncStore,
) -> None:
    """The replan budget survives a step whose other call ran: stale again ends the run."""
    trip = Trip(hotel_store)
    trip.put("Lisbon")
    answers = [flight_and_hotel("Lisbon", 0), book("Porto", 1), book("Madrid", 2)]
    graph, hotels = parallel_graph(hotel_store, trip, answers, {0: "Porto", 1: "Madrid"})
    state = await graph.ainvoke(TASK)

    assert (trip.booked, hotels) == ([], ["Lisbon"])
    outcome = state["planfence_outcome"]
    assert (outcome["status"], outcome["reason"]) == ("blocked", "stale_after_replan")
    assert "Trip booked." not in [m.content for m in state["messages"]]
