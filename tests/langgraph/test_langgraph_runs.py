"""Reads belong to the run that made them, and every version read is cited.

One compiled agent or graph serving two runs at once must stamp each run's plan with exactly its
own reads: were run Y's fresher record ids cited by run X's plan, the gate could allow X's call
whose arguments came from older values.
"""

from __future__ import annotations

import asyncio
import re
import threading
from collections.abc import AsyncIterator, Callable, Sequence
from typing import Any

import pytest
from langchain.agents import create_agent
from langchain_core.language_models.chat_models import BaseChatModel
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, ToolMessage
from langchain_core.outputs import ChatGeneration, ChatResult
from langchain_core.tools import tool
from langgraph.constants import START
from langgraph.graph import MessagesState, StateGraph
from langgraph_helpers import REQ, Trip

from planfence.adapters.langgraph import (
    PlanfenceAgentMiddleware,
    PlanfenceState,
    PlanfenceStore,
    PlanfenceToolNode,
    track_reads,
)
from planfence.plugins.gate import Policy
from planfence.shared_memory import AsyncStore, Store, create_async_store, open_store

TRIPS = ("42", "43")
POLICY = (
    Policy()
    .declare("get_requirements", ungated=True)
    .declare("book_flight", depends_on=["trip/{trip}/requirements"])
)


def key(trip: str) -> str:
    return f"trip/{trip}/requirements"


@pytest.fixture
async def astore() -> AsyncIterator[AsyncStore]:
    store = create_async_store("memory://")
    await store.setup()
    for trip, destination in zip(TRIPS, ("Lisbon", "Oslo"), strict=True):
        await store.own(key(trip), "customer")
        await store.put(key(trip), {"destination": destination}, author="customer")
    yield store
    await store.aclose()


class Rendezvous:
    """Holds each of `n` runs at one point until all of them got there, so their reads overlap."""

    def __init__(self, n: int) -> None:
        self.n = n
        self.arrived = 0
        self.all_there = asyncio.Event()

    async def wait(self) -> None:
        self.arrived += 1
        if self.arrived == self.n:
            self.all_there.set()
        await asyncio.wait_for(self.all_there.wait(), 10)  # a guard against hanging, not timing


class TripAgentModel(BaseChatModel):
    """Plans from the conversation alone, so concurrent runs never share a script: look up the
    trip's requirements, then book the destination the lookup returned, then report."""

    def bind_tools(self, tools: Sequence[Any], **kwargs: Any) -> TripAgentModel:
        return self

    @property
    def _llm_type(self) -> str:
        return "trip-agent"

    def _generate(
        self,
        messages: list[BaseMessage],
        stop: list[str] | None = None,
        run_manager: Any = None,
        **kwargs: Any,
    ) -> ChatResult:
        task = next(m for m in messages if isinstance(m, HumanMessage))
        trip = re.search(r"trip (\d+)", str(task.content)).group(1)  # type: ignore[union-attr]
        results = [m for m in messages if isinstance(m, ToolMessage) and m.status != "error"]
        lookups = [m for m in results if m.name == "get_requirements"]
        if not lookups:
            answer = _call("get_requirements", {"trip": trip}, "lookup")
        elif not any(m.name == "book_flight" for m in results):
            destination = str(lookups[-1].content)
            answer = _call("book_flight", {"trip": trip, "destination": destination}, "book")
        else:
            answer = AIMessage(content="Booked.")
        return ChatResult(generations=[ChatGeneration(message=answer)])


def _call(name: str, args: dict[str, Any], call_id: str) -> AIMessage:
    return AIMessage(content="", tool_calls=[{"name": name, "args": args, "id": call_id}])


def task(trip: str) -> dict[str, Any]:
    return {"messages": [{"role": "user", "content": f"Book the flight for trip {trip}."}]}


async def test_concurrent_agent_runs_cite_only_their_own_reads(astore: AsyncStore) -> None:
    reader = PlanfenceStore(astore)
    meet = Rendezvous(len(TRIPS))
    booked: list[tuple[str, str]] = []

    @tool
    async def get_requirements(trip: str) -> str:
        """The trip's destination."""
        item = await reader.aget(("trip", trip), "requirements")
        assert item is not None
        await meet.wait()  # both runs have read before either plans
        return str(item.value["destination"])

    @tool
    def book_flight(trip: str, destination: str) -> str:
        """Book the trip's flight."""
        booked.append((trip, destination))
        return "booked"

    fence = PlanfenceAgentMiddleware(astore, POLICY, reads=reader, agent="booker")
    agent = create_agent(TripAgentModel(), [get_requirements, book_flight], middleware=[fence])
    states = await asyncio.gather(*(agent.ainvoke(task(t)) for t in TRIPS))

    assert sorted(booked) == [("42", "Lisbon"), ("43", "Oslo")]
    for trip, state in zip(TRIPS, states, strict=True):
        head = await astore.head(key(trip))
        assert state["planfence_reads"] == {key(trip): [head]}
        plan = await astore.get(state["planfence_plan"])
        assert plan.parents == (head,)
        assert state["planfence_outcome"]["status"] == "done"


def test_a_plan_cites_every_version_its_run_read(tmp_path: Any) -> None:
    """The lookup saw Lisbon, then the customer changed the trip to Porto before the model was
    called; the model books the destination the lookup returned. Its plan cites both versions,
    so the gate sees it as stale (citing only the newer one would let the Lisbon booking run)."""
    with open_store(f"sqlite:///{tmp_path / 'pf.db'}") as store:
        trip = Trip(store)
        trip.put("Lisbon")
        reader = PlanfenceStore(store)

        @tool
        def get_requirements(trip: str) -> str:
            """The trip's destination."""
            item = reader.get(("trip", trip), "requirements")
            assert item is not None
            _revise(store, "Porto")  # the customer, right after the lookup
            return str(item.value["destination"])

        model = trip.model(
            [
                _call("get_requirements", {"trip": "42"}, "lookup"),
                _call("book_flight", {"trip": "42", "destination": "Lisbon"}, "c1"),
                _call("book_flight", {"trip": "42", "destination": "Porto"}, "c2"),
                "Booked Porto.",
            ],
            {},
        )
        flights: list[str] = []

        @tool
        def book_flight(trip: str, destination: str) -> str:
            """Book the trip's flight."""
            flights.append(destination)
            return "booked"

        fence = PlanfenceAgentMiddleware(store, POLICY, keys=[REQ], reads=reader, agent="booker")
        agent = create_agent(model, [get_requirements, book_flight], middleware=[fence])
        state = agent.invoke(task("42"))

        assert flights == ["Porto"]  # the Lisbon booking planned from the old lookup never ran
        assert state["planfence_replans"] == 1
        refused = store.get(store.get(state["planfence_plan"]).supersedes or "")
        assert len(refused.parents) == 2  # Lisbon (the lookup) and Porto (shown to the model)
        assert state["planfence_reads"] == {REQ: [trip.head()]}


def test_a_replan_cites_the_versions_its_refusal_showed(tmp_path: Any) -> None:
    """Records reach the model only through a tool. The lookup saw Lisbon; the trip changes;
    the booking is refused with the current value, and the model replans from the refusal
    without looking again: the replan cites the version the refusal showed and runs."""
    with open_store(f"sqlite:///{tmp_path / 'pf.db'}") as store:
        trip = Trip(store)
        first = trip.put("Lisbon")
        reader = PlanfenceStore(store)

        @tool
        def get_requirements(trip: str) -> str:
            """The trip's destination."""
            item = reader.get(("trip", trip), "requirements")
            assert item is not None
            return str(item.value["destination"])

        flights: list[str] = []

        @tool
        def book_flight(trip: str, destination: str) -> str:
            """Book the trip's flight."""
            flights.append(destination)
            return "booked"

        model = trip.model(
            [
                _call("get_requirements", {"trip": "42"}, "lookup"),
                _call("book_flight", {"trip": "42", "destination": "Lisbon"}, "c1"),
                _call("book_flight", {"trip": "42", "destination": "Porto"}, "c2"),
                "Booked Porto.",
            ],
            {1: "Porto"},
        )
        fence = PlanfenceAgentMiddleware(store, POLICY, reads=reader, agent="booker")
        agent = create_agent(model, [get_requirements, book_flight], middleware=[fence])
        state = agent.invoke(task("42"))

        assert flights == ["Porto"]
        assert (state["planfence_outcome"]["status"], state["planfence_replans"]) == ("done", 1)
        plan = store.get(state["planfence_plan"])
        assert plan.parents == (trip.head(),)
        assert store.get(plan.supersedes or "").parents == (first,)


def _revise(store: Store, destination: str) -> None:
    store.put(REQ, {"destination": destination}, author="customer")


class State(MessagesState, PlanfenceState):
    pass


def trip_graph(
    store: AsyncStore | Store,
    reader: PlanfenceStore,
    meet: Callable[[], Any],
) -> Any:
    """A hand-written planner -> tools graph; the planner reads its trip and meets the other run
    before it takes its reads and stamps."""
    fence = PlanfenceToolNode(store, POLICY, planner="planner")

    @tool
    def book_flight(trip: str, destination: str) -> str:
        """Book the trip's flight."""
        return "booked"

    def trip_of(state: State) -> str:
        return re.search(r"trip (\d+)", str(state["messages"][0].content)).group(1)  # type: ignore[union-attr]

    async def aplanner(state: State) -> dict[str, Any]:
        trip = trip_of(state)
        item = await reader.aget(("trip", trip), "requirements")
        assert item is not None
        await meet()
        reply = _call("book_flight", {"trip": trip, "destination": item.value["destination"]}, "b")
        return {"messages": [reply], **await fence.astamp(state, reader.take_reads())}

    def planner(state: State) -> dict[str, Any]:
        trip = trip_of(state)
        item = reader.get(("trip", trip), "requirements")
        assert item is not None
        meet()
        reply = _call("book_flight", {"trip": trip, "destination": item.value["destination"]}, "b")
        return {"messages": [reply], **fence.stamp(state, reader.take_reads())}

    graph = StateGraph(State)
    is_async = asyncio.iscoroutinefunction(meet)
    graph.add_node("planner", aplanner if is_async else planner)
    graph.add_node("tools", fence.tool_node([book_flight]), destinations=fence.destinations)
    graph.add_edge(START, "planner")
    graph.add_edge("planner", "tools")
    return graph.compile()


async def test_concurrent_graph_runs_cite_only_their_own_reads(astore: AsyncStore) -> None:
    reader = PlanfenceStore(astore)
    graph = trip_graph(astore, reader, Rendezvous(len(TRIPS)).wait)
    states = await asyncio.gather(*(graph.ainvoke(task(t)) for t in TRIPS))
    for trip, state in zip(TRIPS, states, strict=True):
        plan = await astore.get(state["planfence_plan"])
        assert plan.parents == (await astore.head(key(trip)),)
        assert state["planfence_outcome"]["status"] == "done"


def test_sync_graph_runs_in_threads_cite_only_their_own_reads(tmp_path: Any) -> None:
    with open_store(f"sqlite:///{tmp_path / 'pf.db'}") as store:
        for trip, destination in zip(TRIPS, ("Lisbon", "Oslo"), strict=True):
            store.own(key(trip), "customer")
            store.put(key(trip), {"destination": destination}, author="customer")
        reader = PlanfenceStore(store)
        barrier = threading.Barrier(len(TRIPS), timeout=10)
        graph = trip_graph(store, reader, barrier.wait)
        states: dict[str, Any] = {}

        def run(trip: str) -> None:
            states[trip] = graph.invoke(task(trip))

        threads = [threading.Thread(target=run, args=(t,)) for t in TRIPS]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        for trip in TRIPS:
            plan = store.get(states[trip]["planfence_plan"])
            assert plan.parents == (store.head(key(trip)),)
            assert states[trip]["planfence_outcome"]["status"] == "done"


def test_store_reads_keep_every_version_per_key(tmp_path: Any) -> None:
    with open_store(f"sqlite:///{tmp_path / 'pf.db'}") as store:
        trip = Trip(store)
        first = trip.put("Lisbon")
        reader = PlanfenceStore(store)
        reader.get(("trip", "42"), "requirements")
        second = trip.put("Porto")
        reader.get(("trip", "42"), "requirements")
        reader.get(("trip", "42"), "requirements")
        assert reader.take_reads() == {REQ: [first, second]}
        assert reader.take_reads() == {}


async def test_store_reads_are_kept_per_task(astore: AsyncStore) -> None:
    reader = PlanfenceStore(astore)
    meet = Rendezvous(len(TRIPS))

    async def read(trip: str) -> dict[str, list[str]]:
        await reader.aget(("trip", trip), "requirements")
        await meet.wait()
        return reader.take_reads()

    taken = await asyncio.gather(*(read(t) for t in TRIPS))
    for trip, reads in zip(TRIPS, taken, strict=True):
        assert reads == {key(trip): [await astore.head(key(trip))]}


def test_track_reads_keeps_a_block_apart(tmp_path: Any) -> None:
    with open_store(f"sqlite:///{tmp_path / 'pf.db'}") as store:
        trip = Trip(store)
        first = trip.put("Lisbon")
        reader = PlanfenceStore(store)
        reader.get(("trip", "42"), "requirements")
        with track_reads() as log:
            second = trip.put("Porto")
            reader.get(("trip", "42"), "requirements")
        assert log.get(store) == {REQ: [second]}
        assert reader.take_reads() == {REQ: [first]}
