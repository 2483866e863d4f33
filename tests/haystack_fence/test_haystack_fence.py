"""The Haystack page's example runs as written, and `PlanfenceHook` behaves in a real `Agent`
(sync `run` on Haystack's own `MockChatGenerator`, async `run_async` on a scripted chat generator
component): refusals reach the model as error tool results, a fault is a block, and the agent's
edges (parallel calls, tools that take the `State`, a continued conversation, no hooks)."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest
from docpages import block
from haystack import component
from haystack.components.agents import Agent
from haystack.components.agents.state.state import State
from haystack.components.generators.chat import MockChatGenerator
from haystack.dataclasses import ChatMessage, ChatRole, ToolCall
from haystack.tools.from_function import create_tool_from_function

from planfence.adapters.haystack import PlanfenceHook
from planfence.adapters.haystack.hook import RECORDS
from planfence.fence import current, verify_sync
from planfence.plugins.gate import (
    Middleware,
    Policy,
    find_decisions,
    find_decisions_sync,
)
from planfence.plugins.gate import ToolCall as GatedCall
from planfence.plugins.gate.middleware import CallNext, Judgement
from planfence.shared_memory import AsyncStore, ConfigError, open_async_store, open_store

PAGE = "docs/frameworks/haystack.md"
REQ = "trip/42/requirements"
TASK = [ChatMessage.from_user("Book the flight for trip 42.")]
POLICY = Policy().declare("book_flight", depends_on=[REQ]).declare("check_weather", ungated=True)

Answer = Callable[[list[ChatMessage]], ChatMessage]


@component
class Scripted:
    """A chat generator for `run_async` whose replies come from `answer`."""

    def __init__(self, answer: Answer) -> None:
        self.answer = answer

    @component.output_types(replies=list[ChatMessage])
    def run(self, messages: list[ChatMessage], tools: Any = None) -> dict[str, Any]:
        return {"replies": [self.answer(messages)]}

    @component.output_types(replies=list[ChatMessage])
    async def run_async(self, messages: list[ChatMessage], tools: Any = None) -> dict[str, Any]:
        return {"replies": [self.answer(messages)]}


def calls(*calls: tuple[str, str]) -> ChatMessage:
    made = [
        ToolCall(tool_name=t, arguments={"destination": d}, id=f"c{n}")
        for n, (t, d) in enumerate(calls)
    ]
    return ChatMessage.from_assistant(tool_calls=made)


def results(messages: list[ChatMessage]) -> list[Any]:
    return [m.tool_call_result for m in messages if m.tool_call_result is not None]


def answered(messages: list[ChatMessage]) -> bool:
    return bool(messages) and messages[-1].is_from(ChatRole.TOOL)


class Trip:
    def __init__(self, store: AsyncStore) -> None:
        self.store = store
        self.booked: list[str] = []
        self.weather: list[str] = []

    def book_flight(self, destination: str) -> str:
        """Book the trip's flight."""
        self.booked.append(destination)
        return f"booked a flight to {destination}"

    def check_weather(self, destination: str) -> str:
        """The weather at the destination."""
        self.weather.append(destination)
        return f"weather at {destination}: sunny"


@pytest.fixture
async def trip(tmp_path: Path) -> AsyncIterator[Trip]:
    store = await open_async_store(f"sqlite:///{tmp_path / 'team.db'}")
    await store.own(REQ, "customer")
    await store.put(REQ, {"destination": "Lisbon"}, author="customer")
    yield Trip(store)
    await store.aclose()


def fence_for(trip: Trip, **options: Any) -> PlanfenceHook:
    return PlanfenceHook(trip.store, POLICY, keys=[REQ], agent="booker", **options)


def test_the_docs_example_runs(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    code = block(PAGE, "Example")
    url = f"sqlite:///{tmp_path / 'team.db'}"  # on a file, what it wrote can be read back after
    code = code.replace('open_store("memory://")', f"open_store({url!r})")
    exec(compile(code, PAGE, "exec"), {"__name__": "docs"})
    assert capsys.readouterr().out.strip() == "booked a flight to Lisbon"
    with open_store(url) as store:
        [allow] = find_decisions_sync(store, source="gate")
        assert (allow.verdict, allow.reason) == ("allow", "current")
        assert store.get(allow.plan).parents == (store.head(REQ),)  # exactly what was shown


def test_a_stale_plan_is_an_error_tool_result_naming_the_change_and_the_replan_books(
    tmp_path: Path,
) -> None:
    """In a sync `Agent.run`, on Haystack's own `MockChatGenerator`."""
    store = open_store(f"sqlite:///{tmp_path / 'team.db'}")
    store.own(REQ, "customer")
    store.put(REQ, {"destination": "Lisbon"}, author="customer")
    booked: list[str] = []
    shown: list[str] = []

    def book_flight(destination: str) -> str:
        """Book the trip's flight."""
        booked.append(destination)
        return f"booked a flight to {destination}"

    def answer(messages: list[ChatMessage]) -> ChatMessage:
        shown.append(next(m.text or "" for m in messages if m.meta.get(RECORDS)))
        got = results(messages)
        if not got:
            store.put(REQ, {"destination": "Porto"}, author="customer")  # while it thinks
            return calls(("book_flight", "Lisbon"))
        if got[-1].error:
            return calls(("book_flight", "Porto"))
        return ChatMessage.from_assistant(str(got[-1].result))

    fence = PlanfenceHook(store, POLICY, keys=[REQ], agent="booker")
    agent = Agent(
        chat_generator=MockChatGenerator(response_fn=answer),
        tools=fence.tools([book_flight]),
        hooks=fence.hooks(),
    )
    try:
        result = agent.run(messages=TASK)
        agent.close()
        assert result["last_message"].text == "booked a flight to Porto"
        assert booked == ["Porto"]
        refused, done = results(result["messages"])
        assert refused.error and not done.error
        assert f"{REQ} changed" in refused.result and '{"destination":"Porto"}' in refused.result
        assert '"Lisbon"' in shown[0] and '"Porto"' in shown[1]  # read again before each call
        verdicts = sorted(d.verdict for d in find_decisions_sync(store, source="gate"))
        assert verdicts == ["allow", "replan"]
    finally:
        store.close()


async def test_a_store_that_cannot_be_reached_is_a_block_and_the_model_is_told(
    tmp_path: Path,
) -> None:
    store = await open_async_store(f"sqlite:///{tmp_path / 'team.db'}")
    await store.aclose()  # before the run
    trip = Trip(store)
    system: list[str] = []

    def answer(messages: list[ChatMessage]) -> ChatMessage:
        system.extend(m.text or "" for m in messages if m.meta.get(RECORDS))
        return (
            ChatMessage.from_assistant("Not booked.")
            if answered(messages)
            else calls(("book_flight", "Lisbon"))
        )

    fence = fence_for(trip)
    agent = Agent(
        chat_generator=Scripted(answer), tools=fence.tools([trip.book_flight]), hooks=fence.hooks()
    )
    result = await agent.run_async(messages=TASK)
    assert trip.booked == []
    assert "cannot be read" in system[0]
    [block_] = results(result["messages"])
    assert block_.error
    assert "(store_unavailable)" in block_.result and "This action will not run." in block_.result


class Broken(Middleware):
    async def on_call_tool(self, call: GatedCall, call_next: CallNext) -> Judgement:
        raise RuntimeError("injected fault in the gate's middleware")


async def test_a_fault_in_the_gate_is_a_block_and_the_tool_does_not_run(trip: Trip) -> None:
    def answer(messages: list[ChatMessage]) -> ChatMessage:
        return (
            ChatMessage.from_assistant("Done.")
            if answered(messages)
            else calls(("book_flight", "Lisbon"))
        )

    fence = fence_for(trip, middleware=[Broken()])
    agent = Agent(
        chat_generator=Scripted(answer), tools=fence.tools([trip.book_flight]), hooks=fence.hooks()
    )
    result = await agent.run_async(messages=TASK)
    await agent.close_async()
    assert trip.booked == []
    [block_] = results(result["messages"])
    assert block_.error and "planfence blocked book_flight" in block_.result


async def test_without_the_hooks_gated_tools_are_blocked_and_ungated_run(trip: Trip) -> None:
    def answer(messages: list[ChatMessage]) -> ChatMessage:
        if answered(messages):
            return ChatMessage.from_assistant("Done.")
        return calls(("book_flight", "Lisbon"), ("check_weather", "Lisbon"))

    fence = fence_for(trip)
    tools = fence.tools([trip.book_flight, trip.check_weather])
    agent = Agent(chat_generator=Scripted(answer), tools=tools)  # no hooks: nothing shown
    result = await agent.run_async(messages=TASK)
    await fence.aclose()
    assert trip.booked == [] and trip.weather == ["Lisbon"]
    by_tool = {r.origin.tool_name: r for r in results(result["messages"])}
    assert by_tool["book_flight"].error and "(missing_plan)" in by_tool["book_flight"].result
    assert not by_tool["check_weather"].error


async def test_calls_of_one_answer_share_one_plan(trip: Trip) -> None:
    def answer(messages: list[ChatMessage]) -> ChatMessage:
        if answered(messages):
            return ChatMessage.from_assistant("Done.")
        return calls(("book_flight", "Lisbon"), ("book_flight", "Lisbon"))

    fence = fence_for(trip)
    agent = Agent(
        chat_generator=Scripted(answer), tools=fence.tools([trip.book_flight]), hooks=fence.hooks()
    )
    await agent.run_async(messages=TASK)
    await agent.close_async()
    assert trip.booked == ["Lisbon", "Lisbon"]
    found = await find_decisions(trip.store, source="gate")
    assert [d.verdict for d in found] == ["allow", "allow"]
    assert len({d.plan for d in found}) == 1  # one answer, one plan


async def test_a_tool_that_takes_the_run_state_still_gets_it(trip: Trip) -> None:
    seen: list[Any] = []

    def book_flight(destination: str, state: State) -> str:
        """Book the trip's flight."""
        seen.append(state)
        return trip.book_flight(destination)

    def answer(messages: list[ChatMessage]) -> ChatMessage:
        return (
            ChatMessage.from_assistant("Done.")
            if answered(messages)
            else calls(("book_flight", "Lisbon"))
        )

    fence = fence_for(trip)
    agent = Agent(
        chat_generator=Scripted(answer), tools=fence.tools([book_flight]), hooks=fence.hooks()
    )
    result = await agent.run_async(messages=TASK)
    await agent.close_async()
    [done] = results(result["messages"])
    assert not done.error, done.result
    assert trip.booked == ["Lisbon"]
    assert len(seen) == 1 and isinstance(seen[0], State)


async def test_a_continued_conversation_holds_one_records_message_current(trip: Trip) -> None:
    def answer(messages: list[ChatMessage]) -> ChatMessage:
        if answered(messages):
            return ChatMessage.from_assistant(str(results(messages)[-1].result))
        return calls(("book_flight", "Lisbon"))

    fence = fence_for(trip)
    agent = Agent(
        chat_generator=Scripted(answer),
        tools=fence.tools([trip.book_flight]),
        system_prompt="You book flights.",
        hooks=fence.hooks(),
    )
    first = await agent.run_async(messages=TASK)
    await trip.store.put(REQ, {"destination": "Lisbon", "seat": "aisle"}, author="customer")
    again = [*first["messages"], ChatMessage.from_user("Book it again.")]
    second = await agent.run_async(messages=again)
    await agent.close_async()
    records = [m.text or "" for m in second["messages"] if m.meta.get(RECORDS)]
    assert len(records) == 1 and '"seat":"aisle"' in records[0]
    assert trip.booked == ["Lisbon", "Lisbon"]
    found = await find_decisions(trip.store, source="gate")
    assert sorted(d.verdict for d in found) == ["allow", "allow"]


def test_a_sync_tool_in_a_sync_run_holds_its_allows_fencing_token(tmp_path: Path) -> None:
    """`Agent.run` runs tools in worker threads: the token is the tool's own there too."""
    store = open_store(f"sqlite:///{tmp_path / 'team.db'}")
    store.own(REQ, "customer")
    store.put(REQ, {"destination": "Lisbon"}, author="customer")
    tokens: list[Any] = []

    def book_flight(destination: str) -> str:
        """Book the trip's flight."""
        tokens.append(current())
        return f"booked a flight to {destination}"

    def answer(messages: list[ChatMessage]) -> ChatMessage:
        done = ChatMessage.from_assistant("Done.")
        return done if answered(messages) else calls(("book_flight", "Lisbon"))

    fence = PlanfenceHook(store, POLICY, keys=[REQ], agent="booker")
    agent = Agent(
        chat_generator=MockChatGenerator(response_fn=answer),
        tools=fence.tools([book_flight]),
        hooks=fence.hooks(),
    )
    try:
        agent.run(messages=TASK)
        agent.close()
        [token] = tokens
        assert token is not None
        checked = verify_sync(token, store, tool="book_flight", args={"destination": "Lisbon"})
        assert checked.heads[REQ].head == store.head(REQ)
    finally:
        store.close()


async def test_runs_at_once_keep_plan_chains_of_their_own(trip: Trip) -> None:
    """Two runs of one agent and one hook, their model calls interleaved: neither run's plan
    supersedes the other's."""
    arrived: list[None] = []
    both = asyncio.Event()

    @component
    class Waiting:
        @component.output_types(replies=list[ChatMessage])
        def run(self, messages: list[ChatMessage], tools: Any = None) -> dict[str, Any]:
            raise NotImplementedError

        @component.output_types(replies=list[ChatMessage])
        async def run_async(self, messages: list[ChatMessage], tools: Any = None) -> dict[str, Any]:
            if answered(messages):
                return {"replies": [ChatMessage.from_assistant("Done.")]}
            arrived.append(None)
            if len(arrived) == 2:
                both.set()
            await asyncio.wait_for(both.wait(), 10)  # both runs were shown the records
            return {"replies": [calls(("book_flight", "Lisbon"))]}

    fence = fence_for(trip)
    agent = Agent(
        chat_generator=Waiting(), tools=fence.tools([trip.book_flight]), hooks=fence.hooks()
    )
    await asyncio.gather(agent.run_async(messages=TASK), agent.run_async(messages=TASK))
    await agent.close_async()
    assert trip.booked == ["Lisbon", "Lisbon"]
    found = await find_decisions(trip.store, source="gate")
    assert [d.verdict for d in found] == ["allow", "allow"]
    plans = [await trip.store.get(d.plan) for d in found if d.plan]
    assert len({p.id for p in plans}) == 2
    assert [p.supersedes for p in plans] == [None, None]


async def test_a_tool_given_without_the_gate_stops_the_run_before_the_model_is_called(
    trip: Trip,
) -> None:
    asked: list[int] = []

    def answer(messages: list[ChatMessage]) -> ChatMessage:
        asked.append(1)
        if answered(messages):
            return ChatMessage.from_assistant("Done.")
        return calls(("book_flight", "Lisbon"))

    fence = fence_for(trip)
    # book_flight is given as it is, check_weather (ungated) behind the gate
    tools = [create_tool_from_function(trip.book_flight), *fence.tools([trip.check_weather])]
    agent = Agent(chat_generator=Scripted(answer), tools=tools, hooks=fence.hooks())
    with pytest.raises(ConfigError, match="book_flight"):
        await agent.run_async(messages=TASK)
    sync_agent = Agent(chat_generator=Scripted(answer), tools=tools, hooks=fence.hooks())
    with pytest.raises(ConfigError, match="book_flight"):
        sync_agent.run(messages=TASK)
    await fence.aclose()
    assert trip.booked == [] and asked == []


async def test_an_ungated_tool_may_be_given_without_the_gate(trip: Trip) -> None:
    def answer(messages: list[ChatMessage]) -> ChatMessage:
        if answered(messages):
            return ChatMessage.from_assistant("Done.")
        return calls(("check_weather", "Lisbon"))

    fence = fence_for(trip)
    tools = [*fence.tools([trip.book_flight]), create_tool_from_function(trip.check_weather)]
    agent = Agent(chat_generator=Scripted(answer), tools=tools, hooks=fence.hooks())
    await agent.run_async(messages=TASK)
    await fence.aclose()
    assert trip.weather == ["Lisbon"]
