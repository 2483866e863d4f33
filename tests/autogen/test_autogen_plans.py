"""Plans a `PlanningAgent` stamps: each supersedes the agent's previous plan (so ungated steps do
not renew the one replan), each cites every record version its model could see, and the
inspection histories stay bounded."""

from __future__ import annotations

import re
from collections.abc import AsyncIterator, Sequence
from typing import Any

import pytest
from autogen_agentchat.messages import TextMessage
from autogen_core import CancellationToken
from autogen_core.models import CreateResult, LLMMessage, SystemMessage
from autogen_core.tools import FunctionTool, StaticWorkbench
from autogen_ext.models.replay import ReplayChatCompletionClient
from autogen_helpers import MODEL_INFO, POLICY, REQ, Trip

from planfence.adapters.autogen import PlanfenceWorkbench, PlanningAgent, SharedMemory
from planfence.shared_memory import AsyncStore, create_async_store

VERSION = re.compile(r"\(version ([0-9a-f]{12})\)")


class RecordingClient(ReplayChatCompletionClient):
    """A scripted model that keeps the messages of every call."""

    def __init__(self, completions: Sequence[str]) -> None:
        super().__init__(list(completions), model_info=MODEL_INFO)
        self.prompts: list[list[LLMMessage]] = []

    async def create(self, messages: Sequence[LLMMessage], *args: Any, **kw: Any) -> CreateResult:
        self.prompts.append(list(messages))
        return await super().create(messages, *args, **kw)


@pytest.fixture
async def astore() -> AsyncIterator[AsyncStore]:
    store = create_async_store("memory://")
    await store.setup()
    try:
        yield store
    finally:
        await store.aclose()


def planner_for(store: AsyncStore, client: ReplayChatCompletionClient) -> PlanningAgent:
    return PlanningAgent(
        "planner",
        client,
        memory=[SharedMemory(store, keys=[REQ])],
        system_message="Plan the booking from the current requirements.",
    )


def executor_says(route: str, plan: str, reason: str) -> TextMessage:
    meta = {"planfence.route": route, "planfence.plan": plan, "planfence.reason": reason}
    return TextMessage(content=f"executor: {route}", source="executor", metadata=meta)


async def turn(agent: PlanningAgent, message: TextMessage) -> str:
    response = await agent.on_messages([message], CancellationToken())
    return response.chat_message.metadata["planfence.plan"]


def tools(
    store: AsyncStore, cls: type[PlanfenceWorkbench] = PlanfenceWorkbench
) -> PlanfenceWorkbench:
    def book_flight(destination: str) -> str:
        """Book the flight."""
        return f"booked {destination}"

    def weather(city: str) -> str:
        """The forecast."""
        return "sunny"

    inner = StaticWorkbench(
        [FunctionTool(book_flight, description="Book."), FunctionTool(weather, description="Sky.")]
    )
    policy = POLICY.declare("weather", ungated=True)
    return cls(inner, store=store, policy=policy, agent="executor")


async def test_ungated_step_does_not_renew_the_replan(astore: AsyncStore) -> None:
    """book(Lisbon) stale -> replan; the replan only looks up the weather (ungated, allowed);
    the next plan is stale again: the replan was spent, so the gate blocks."""
    trip = Trip(astore)
    await trip.seed("Lisbon")
    planner = planner_for(astore, ReplayChatCompletionClient(["p1", "p2", "p3", "p4"]))
    fence = tools(astore)

    p1 = await turn(planner, TextMessage(content="Book trip 42.", source="user"))
    await trip.revise("Porto")()
    fence.bind(p1)
    assert (await fence.check("book_flight", {"destination": "Lisbon"})).verdict == "replan"

    p2 = await turn(planner, executor_says("replan", p1, "stale_dependencies"))
    fence.bind(p2)
    assert (await fence.check("weather", {"city": "Porto"})).reason == "ungated"

    p3 = await turn(planner, executor_says("done", p2, "ungated"))
    assert [p.supersedes for p in planner.plans] == [None, p1, p2]
    await trip.revise("Madrid")()
    fence.bind(p3)
    verdict = await fence.check("book_flight", {"destination": "Porto"})
    assert (verdict.verdict, verdict.reason) == ("block", "stale_after_replan")

    # A reset starts a new chain for an unrelated request.
    await planner.on_reset(CancellationToken())
    p4 = await turn(planner, TextMessage(content="Book trip 43.", source="user"))
    assert (await astore.get(p4)).supersedes is None


async def test_second_turn_cites_every_version_the_model_sees(astore: AsyncStore) -> None:
    trip = Trip(astore)
    first = await trip.seed("Lisbon")
    client = RecordingClient(["Plan: Lisbon.", "Plan: Porto."])
    planner = planner_for(astore, client)
    await turn(planner, TextMessage(content="Book trip 42.", source="user"))
    await trip.revise("Porto")()
    await turn(planner, TextMessage(content="Requirements changed, plan again.", source="user"))

    current = await astore.head(REQ)
    plan = planner.plans[-1]
    assert plan.parents == (current,)
    seen = {v for m in client.prompts[-1] for v in VERSION.findall(str(m.content))}
    assert seen and all(any(p.startswith(v) for p in plan.parents) for v in seen)
    assert first[:12] not in seen
    # One records message in the agent's context, the current one.
    shown = [
        m
        for m in await planner.model_context.get_messages()
        if isinstance(m, SystemMessage) and "(version " in m.content
    ]
    assert len(shown) == 1 and (current or "")[:12] in shown[0].content


async def test_memory_keeps_other_system_messages(astore: AsyncStore) -> None:
    trip = Trip(astore)
    await trip.seed("Lisbon")
    memory = SharedMemory(astore, keys=[REQ])
    planner = planner_for(astore, RecordingClient(["a"]))
    context = planner.model_context
    other = SystemMessage(content=f"{memory.header}\n- notes: keep this")
    await context.add_message(other)
    await memory.update_context(context)
    await trip.revise("Porto")()
    await memory.update_context(context)
    messages = await context.get_messages()
    assert messages[0] == other and len(messages) == 2
    assert "Porto" in str(messages[1].content)


async def test_histories_are_bounded(astore: AsyncStore) -> None:
    class Small(PlanfenceWorkbench):
        VERDICT_HISTORY = 2

    fence = tools(astore, Small)
    for i in range(3):
        await fence.call_tool("book_flight", {"destination": f"d{i}"})
    assert len(fence.verdicts) == 2

    class SmallPlanner(PlanningAgent):
        PLAN_HISTORY = 2

    await Trip(astore).seed("Lisbon")
    planner = SmallPlanner(
        "planner",
        ReplayChatCompletionClient(["a", "b", "c"], model_info=MODEL_INFO),
        memory=[SharedMemory(astore, keys=[REQ])],
    )
    ids = [await turn(planner, TextMessage(content=f"t{i}", source="user")) for i in range(3)]
    assert [p.id for p in planner.plans] == ids[1:]
