"""GraphFlow routing, component round-trips, refusals that never raise, the missing extra."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from autogen_agentchat.agents import AssistantAgent
from autogen_agentchat.conditions import MaxMessageTermination
from autogen_agentchat.messages import BaseChatMessage, TextMessage
from autogen_agentchat.teams import DiGraphBuilder, GraphFlow, RoundRobinGroupChat
from autogen_core.tools import FunctionTool, StaticWorkbench
from autogen_ext.models.replay import ReplayChatCompletionClient
from autogen_helpers import MODEL_INFO, POLICY, REQ, Trip

from planfence.adapters.autogen import (
    FencedAgent,
    PlanfenceTermination,
    PlanfenceWorkbench,
    PlanningAgent,
    SharedMemory,
    add_replan_route,
    proceeds,
    replan_selector,
    run_outcome,
)
from planfence.plugins.gate import CallNext, Judgement, Middleware, ToolCall, create_plan
from planfence.plugins.gate.checkers import gate_checker
from planfence.shared_memory import create_async_store, open_async_store

TASK = "Book the flight for trip 42."


def booking_flow(planner: Any, executor: Any) -> GraphFlow:
    """planner -> executor -> reporter, with the executor's refusal routed back once."""
    reporter = AssistantAgent(
        "reporter", ReplayChatCompletionClient(["Trip booked."], model_info=MODEL_INFO)
    )
    builder = DiGraphBuilder()
    builder.add_node(planner).add_node(executor).add_node(reporter)
    builder.add_edge(planner, executor)
    builder.add_edge(executor, reporter, condition=proceeds)
    add_replan_route(builder, planner, executor)
    return GraphFlow(
        [planner, executor, reporter],
        graph=builder.build(),
        termination_condition=MaxMessageTermination(12),
    )


async def test_graphflow_routes_a_refusal_back_to_the_planner_once() -> None:
    store = await open_async_store("memory://")
    trip = Trip(store)
    await trip.seed("Lisbon")
    _, planner, executor = trip.team(
        plans=["Plan: fly to Lisbon.", "Plan: fly to Porto."],
        calls=["Lisbon", "Porto"],
        revisions={0: "Porto"},
    )
    result = await booking_flow(planner, executor).run(task=TASK)

    assert trip.booked == ["Porto"]
    speakers = [m.source for m in result.messages if isinstance(m, BaseChatMessage)]
    assert speakers == ["user", "planner", "executor", "planner", "executor", "reporter"]
    assert run_outcome(result).replans == 1


async def test_graphflow_blocked_run_ends_without_reaching_the_reporter() -> None:
    store = await open_async_store("memory://")
    trip = Trip(store)
    await trip.seed("Lisbon")
    _, planner, executor = trip.team(
        plans=["Plan: fly to Lisbon.", "Plan: fly to Porto."],
        calls=["Lisbon", "Porto"],
        revisions={0: "Porto", 1: "Madrid"},
    )
    result = await booking_flow(planner, executor).run(task=TASK)

    assert trip.booked == []
    assert "reporter" not in [m.source for m in result.messages if isinstance(m, BaseChatMessage)]
    assert run_outcome(result).blocked


def test_replan_selector_sends_refusals_to_the_planner() -> None:
    select = replan_selector("planner", "executor")
    assert select([]) == "planner"
    planned = TextMessage(content="plan", source="planner")
    refused = TextMessage(content="no", source="executor", metadata={"planfence.route": "replan"})
    done = TextMessage(content="ok", source="executor", metadata={"planfence.route": "done"})
    assert select([planned]) == "executor"
    assert select([planned, refused]) == "planner"
    assert select([planned, done]) is None


async def test_a_store_that_fails_is_a_refusal_not_an_exception(tmp_path: Path) -> None:
    """The workbench never raises: AssistantAgent would wait forever on its tool stream."""
    store = create_async_store(f"sqlite:///{tmp_path / 'pf.db'}")
    await store.setup()
    ran: list[str] = []

    def book_flight(destination: str) -> str:
        ran.append(destination)
        return "booked"

    fence = PlanfenceWorkbench(
        StaticWorkbench([FunctionTool(book_flight, description="Book.")]),
        store=store,
        policy=POLICY,
    )
    await store.aclose()
    fence.bind("0" * 64)
    result = await fence.call_tool("book_flight", {"destination": "Lisbon"})
    assert result.is_error and "planfence blocked book_flight" in result.to_text()
    no_plan = PlanfenceWorkbench(StaticWorkbench([]), store="memory://", policy=POLICY)
    missing = await no_plan.call_tool("book_flight", {"destination": "Lisbon"})
    assert missing.is_error and "missing_plan" in missing.to_text()
    undeclared = await no_plan.call_tool("cancel_trip", {})
    assert undeclared.is_error and "undeclared_tool" in undeclared.to_text()
    assert ran == []


# Loading a FunctionTool from a config makes AutoGen warn that it executes the tool's source
# code; the round trip below loads one on purpose.
@pytest.mark.filterwarnings("ignore:(?s).*SECURITY WARNING:UserWarning")
async def test_team_round_trips_through_dump_and_load(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    url = f"sqlite:///{tmp_path / 'pf.db'}"
    bookings = tmp_path / "bookings.txt"
    monkeypatch.setenv("PLANFENCE_TEST_BOOKINGS", str(bookings))
    store = await open_async_store(url)
    trip = Trip(store)
    await trip.seed("Lisbon")

    def book_flight(destination: str) -> str:
        """Book the flight for the trip."""
        with open(os.environ["PLANFENCE_TEST_BOOKINGS"], "a") as f:
            f.write(destination + "\n")
        return f"booked {destination}"

    planner = PlanningAgent(
        "planner",
        ReplayChatCompletionClient(["Plan: Lisbon.", "Plan: Porto."], model_info=MODEL_INFO),
        memory=[SharedMemory(url, keys=[REQ])],
    )
    tools = PlanfenceWorkbench(
        StaticWorkbench([FunctionTool(book_flight, description="Book.", global_imports=["os"])]),
        store=url,
        policy=POLICY,
        agent="executor",
    )
    from autogen_helpers import tool_call

    executor = FencedAgent(
        "executor",
        ReplayChatCompletionClient(
            [
                tool_call("book_flight", {"destination": "Lisbon"}),
                tool_call("book_flight", {"destination": "Porto"}),
            ],
            model_info=MODEL_INFO,
        ),
        workbench=tools,
    )
    team = RoundRobinGroupChat(
        [planner, executor], termination_condition=PlanfenceTermination(), max_turns=8
    )
    config = team.dump_component()
    assert config.config["participants"][0]["provider"] == (
        "planfence.adapters.autogen.PlanningAgent"
    )
    loaded = RoundRobinGroupChat.load_component(config)
    loaded_planner, loaded_executor = loaded._participants
    assert isinstance(loaded_planner, PlanningAgent)
    assert isinstance(loaded_executor, FencedAgent)
    fence = loaded_executor.fences[0]
    assert (fence.store.url, fence.gate.factory, fence.agent) == (url, gate_checker, "executor")
    assert fence.policy == POLICY
    memory_config = loaded_planner.dump_component().config["memory"][0]
    assert memory_config == planner.dump_component().config["memory"][0]

    result = await loaded.run(task=TASK)
    assert bookings.read_text().split() == ["Lisbon"]
    outcome = run_outcome(result)
    assert outcome.status == "done"
    # The same loaded fence, driven directly under the executor's plan, refuses that plan once
    # the requirements change.
    await trip.revise("Porto")()
    assert loaded_executor.plan_id == outcome.plans[-1]
    fence.bind(loaded_executor.plan_id)
    refused = await fence.call_tool("book_flight", {"destination": "Lisbon"})
    assert refused.is_error and f"{REQ} changed" in refused.to_text()
    assert bookings.read_text().split() == ["Lisbon"]
    await fence.stop()
    await store.aclose()


def test_missing_extra_names_the_pip_command() -> None:
    code = (
        "import sys\n"
        "for name in ('autogen_core', 'autogen_agentchat'):\n"
        "    sys.modules[name] = None\n"
        "from planfence.shared_memory import MissingExtraError\n"
        "try:\n"
        "    from planfence.adapters.autogen import SharedMemory\n"
        "except MissingExtraError as exc:\n"
        "    print(exc)\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout
    assert "pip install 'planfence[autogen]'" in out


class SeenTools(Middleware):
    def __init__(self) -> None:
        self.seen: list[tuple[str, Any]] = []

    async def on_call_tool(self, call: ToolCall, call_next: CallNext) -> Judgement:
        self.seen.append((call.tool, call.plan))
        return await call_next(call)


async def test_workbench_calls_pass_through_user_middleware() -> None:
    store = create_async_store("memory://")
    await store.setup()
    await store.own(REQ, "customer")
    current = await store.put(REQ, {"destination": "Lisbon"}, author="customer")
    plan = await create_plan(store, author="planner", parents=[current.id])
    ran: list[str] = []

    def book_flight(destination: str) -> str:
        ran.append(destination)
        return "booked"

    seen = SeenTools()
    fence = PlanfenceWorkbench(
        StaticWorkbench([FunctionTool(book_flight, description="Book.")]),
        store=store,
        policy=POLICY,
        middleware=[seen],
    )
    fence.bind(plan.id)
    result = await fence.call_tool("book_flight", {"destination": "Lisbon"})
    assert not result.is_error and ran == ["Lisbon"]
    assert seen.seen == [("book_flight", plan.id)]
    await store.aclose()
