"""Teams running at once share memories and workbenches, never read sets or plans.

A plan must cite what its own planner's turn was shown, and a call must be checked under its own
executor's plan: were another team's fresher reads or plan used instead, the gate would allow a
call whose arguments came from stale values. One agent object run in two turns at once holds one
conversation for both, so those turns fail closed.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping, Sequence
from typing import Any

import pytest
from autogen_agentchat.conditions import MaxMessageTermination
from autogen_agentchat.teams import RoundRobinGroupChat
from autogen_core import CancellationToken
from autogen_core.tools import FunctionTool, StaticWorkbench, ToolSchema
from autogen_helpers import POLICY, REQ, ThinkingClient, Trip, tool_call

from planfence.adapters.autogen import (
    FencedAgent,
    PlanfenceTermination,
    PlanfenceWorkbench,
    PlanningAgent,
    SharedMemory,
    run_outcome,
)
from planfence.plugins.gate import create_plan
from planfence.shared_memory import AsyncStore, create_async_store

TASK = "Book the flight for trip 42."
Hook = Callable[[], Awaitable[None]]


@pytest.fixture
async def astore() -> AsyncIterator[AsyncStore]:
    store = create_async_store("memory://")
    await store.setup()
    yield store
    await store.aclose()


async def meet(event: asyncio.Event) -> None:
    await asyncio.wait_for(event.wait(), 10)  # a guard against hanging, not a timing check


class Booking:
    """The flight-booking tool and what it booked, shared by every team that gets it."""

    def __init__(self) -> None:
        self.booked: list[str] = []

    def workbench(self, store: AsyncStore, agent: str = "executor") -> PlanfenceWorkbench:
        booked = self.booked

        def book_flight(destination: str) -> str:
            """Book the flight for the trip."""
            booked.append(destination)
            return f"booked a flight to {destination}"

        tool = FunctionTool(book_flight, description="Book a flight.")
        return PlanfenceWorkbench(StaticWorkbench([tool]), store=store, policy=POLICY, agent=agent)


def planner(plans: Sequence[str], memory: SharedMemory, hooks: Mapping[int, Hook]) -> Any:
    return PlanningAgent("planner", ThinkingClient(plans, hooks), memory=[memory])


def executor(calls: Sequence[str], workbench: PlanfenceWorkbench, hooks: Mapping[int, Hook]) -> Any:
    answers = [
        tool_call("book_flight", {"destination": d}, f"call-{i}") for i, d in enumerate(calls)
    ]
    return FencedAgent("executor", ThinkingClient(answers, hooks), workbench=workbench)


def team(*agents: Any) -> RoundRobinGroupChat:
    return RoundRobinGroupChat(
        list(agents), termination_condition=PlanfenceTermination() | MaxMessageTermination(12)
    )


async def test_a_shared_memory_gives_each_plan_its_own_turns_reads(astore: AsyncStore) -> None:
    """X's planner is shown Lisbon; the customer changes the trip to Porto; Y's planner, sharing
    the memory, is shown Porto before X stamps. X's plan cites Lisbon, so X's Lisbon booking is
    refused and replanned, instead of passing as current under Y's fresher read."""
    trip = Trip(astore)
    lisbon = await trip.seed("Lisbon")
    memory = SharedMemory(astore, keys=[REQ])
    booking = Booking()
    x_shown, y_shown = asyncio.Event(), asyncio.Event()

    async def x_planning() -> None:
        await trip.revise("Porto")()
        x_shown.set()
        await meet(y_shown)

    async def y_planning() -> None:
        y_shown.set()

    px = planner(["Plan: fly to Lisbon.", "Plan: fly to Porto."], memory, {0: x_planning})
    ex = executor(["Lisbon", "Porto"], booking.workbench(astore), {})
    py = planner(["Plan: fly to Porto."], memory, {0: y_planning})
    ey = executor(["Porto"], booking.workbench(astore), {})

    async def run_y() -> Any:
        await meet(x_shown)
        return await team(py, ey).run(task=TASK)

    rx, ry = await asyncio.gather(team(px, ex).run(task=TASK), run_y())

    porto = await astore.head(REQ)
    assert booking.booked == ["Porto", "Porto"]  # nobody flew to Lisbon on a stale plan
    assert px.plans[0].parents == (lisbon,)
    assert px.plans[1].parents == (porto,) and px.plans[1].supersedes == px.plans[0].id
    assert [p.parents for p in py.plans] == [(porto,)]
    assert (run_outcome(rx).status, run_outcome(rx).replans) == ("done", 1)
    assert (run_outcome(ry).status, run_outcome(ry).replans) == ("done", 0)


async def test_a_shared_workbench_checks_each_call_under_its_own_agents_plan(
    astore: AsyncStore,
) -> None:
    """X's executor holds a Lisbon plan when the trip changes; Y plans Porto and its executor,
    on the same workbench, takes its turn before X's call. X's call is still checked under X's
    plan and refused, not allowed under Y's current one."""
    trip = Trip(astore)
    await trip.seed("Lisbon")
    booking = Booking()
    shared = booking.workbench(astore)
    x_acting, y_acting = asyncio.Event(), asyncio.Event()

    async def x_executing() -> None:
        await trip.revise("Porto")()
        x_acting.set()
        await meet(y_acting)

    async def y_executing() -> None:
        y_acting.set()

    px = planner(
        ["Plan: fly to Lisbon.", "Plan: fly to Porto."], SharedMemory(astore, keys=[REQ]), {}
    )
    ex = executor(["Lisbon", "Porto"], shared, {0: x_executing})
    py = planner(["Plan: fly to Porto."], SharedMemory(astore, keys=[REQ]), {})
    ey = executor(["Porto"], shared, {0: y_executing})

    async def run_y() -> Any:
        await meet(x_acting)
        return await team(py, ey).run(task=TASK)

    rx, ry = await asyncio.gather(team(px, ex).run(task=TASK), run_y())

    assert booking.booked == ["Porto", "Porto"]
    assert (run_outcome(rx).status, run_outcome(rx).replans) == ("done", 1)
    assert run_outcome(ry).status == "done"
    by_plan = {v.plan: v.verdict for v in shared.verdicts}
    assert by_plan[px.plans[0].id] == "replan"
    assert by_plan[px.plans[1].id] == by_plan[py.plans[0].id] == "allow"


async def test_one_agent_in_two_teams_at_once_fails_closed(astore: AsyncStore) -> None:
    """The same planner and executor objects run by two teams at once: their turns overlap in
    one conversation, so the plans cite nothing and every call is blocked."""
    trip = Trip(astore)
    await trip.seed("Lisbon")
    booking = Booking()
    first, second = asyncio.Event(), asyncio.Event()

    async def first_turn() -> None:
        first.set()
        await meet(second)

    async def second_turn() -> None:
        second.set()

    shared_planner = planner(
        ["Plan: fly to Lisbon.", "Plan: fly to Lisbon."],
        SharedMemory(astore, keys=[REQ]),
        {0: first_turn, 1: second_turn},
    )
    shared_executor = executor(["Lisbon", "Lisbon"], booking.workbench(astore), {})

    async def run_second() -> Any:
        await meet(first)
        return await team(shared_planner, shared_executor).run(task=TASK)

    results = await asyncio.gather(
        team(shared_planner, shared_executor).run(task=TASK), run_second()
    )

    assert booking.booked == []
    assert [run_outcome(r).status for r in results] == ["blocked", "blocked"]
    assert [p.parents for p in shared_planner.plans] == [(), ()]


class ListsOnce(StaticWorkbench):
    """A workbench whose tool listing fails after the first one (a server that went away)."""

    listed = 0

    async def list_tools(self) -> list[ToolSchema]:
        self.listed += 1
        if self.listed > 1:
            raise ConnectionError("tool server went away")
        return await super().list_tools()

    async def call_tool(
        self,
        name: str,
        arguments: Mapping[str, Any] | None = None,
        cancellation_token: CancellationToken | None = None,
        call_id: str | None = None,
    ) -> Any:
        raise ConnectionError("tool server went away")


async def test_a_failing_workbench_answers_with_errors_never_exceptions(
    astore: AsyncStore,
) -> None:
    """AssistantAgent lists the tools again before each call and waits forever on its tool
    stream if the listing or the call raises: neither may raise once the tools were listed."""
    trip = Trip(astore)
    await trip.seed("Lisbon")
    ran: list[str] = []

    def book_flight(destination: str) -> str:
        """Book the flight for the trip."""
        ran.append(destination)
        return "booked"

    inner = ListsOnce([FunctionTool(book_flight, description="Book a flight.")])
    fence = PlanfenceWorkbench(inner, store=astore, policy=POLICY, agent="executor")
    listed = await fence.list_tools()
    assert await fence.list_tools() == listed  # the server went away: the last listing stands

    shown = await SharedMemory(astore, keys=[REQ]).read()
    plan = await create_plan(astore, author="planner", parents=[r.id for r in shown])
    fence.bind(plan.id)
    failed = await fence.call_tool("book_flight", {"destination": "Lisbon"})
    assert failed.is_error and "tool server went away" in failed.to_text()
    assert [v.verdict for v in fence.verdicts] == ["allow"]
    assert ran == []
