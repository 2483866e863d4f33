"""The LlamaIndex page's example runs as written, and `PlanfenceMemoryBlock` behaves in a real
`FunctionAgent` / `AgentWorkflow` driven by LlamaIndex's own `MockFunctionCallingLLM`: refusals
reach the model as error tool outputs, a fault is a block, and the workflow's edges (parallel
calls, tools that take the `Context`, runs that continue a `Context`, no block in the memory).

No `from __future__ import annotations` here: LlamaIndex finds a tool's `Context` parameter by
its annotation object, which a string annotation is not."""

import asyncio
from collections.abc import AsyncIterator, Callable, Sequence
from pathlib import Path
from typing import Any

import pytest
from docpages import block
from llama_index.core.agent.workflow import AgentWorkflow, FunctionAgent, ReActAgent, ToolCallResult
from llama_index.core.base.llms.types import ToolCallBlock
from llama_index.core.llms import ChatMessage, MessageRole
from llama_index.core.llms.mock import MockFunctionCallingLLM
from llama_index.core.memory import Memory
from llama_index.core.workflow import Context
from sqlalchemy.ext.asyncio import AsyncEngine, create_async_engine

from planfence.adapters.llamaindex import PlanfenceMemoryBlock
from planfence.plugins.gate import (
    Middleware,
    Policy,
    ToolCall,
    find_decisions,
    find_decisions_sync,
)
from planfence.plugins.gate.middleware import CallNext, Judgement
from planfence.shared_memory import AsyncStore, ConfigError, open_async_store, open_store

# Building any agent workflow reads deprecated pydantic attributes (the workflow looks for its
# steps with `inspect.getmembers`): LlamaIndex's warning, not ours.
pytestmark = pytest.mark.filterwarnings(
    "ignore::pydantic.warnings.PydanticDeprecationWarning:inspect"
)

PAGE = "docs/frameworks/llamaindex.md"
REQ = "trip/42/requirements"
TASK = "Book the flight for trip 42."
POLICY = Policy().declare("book_flight", depends_on=[REQ]).declare("check_weather", ungated=True)

Answer = Callable[[Sequence[ChatMessage]], ChatMessage]


def llm(answer: Answer) -> MockFunctionCallingLLM:
    async def respond(messages: Sequence[ChatMessage], **_: Any) -> AsyncIterator[ChatMessage]:
        yield answer(messages)

    return MockFunctionCallingLLM(response_generator=respond)


def calls(*calls: tuple[str, str]) -> ChatMessage:
    blocks = [
        ToolCallBlock(tool_call_id=f"c{n}", tool_name=tool, tool_kwargs={"destination": dest})
        for n, (tool, dest) in enumerate(calls)
    ]
    return ChatMessage(role=MessageRole.ASSISTANT, blocks=list(blocks))


def done(text: str = "Done.") -> ChatMessage:
    return ChatMessage(role=MessageRole.ASSISTANT, content=text)


def tool_results(messages: Sequence[ChatMessage]) -> list[str]:
    return [m.content or "" for m in messages if m.role == MessageRole.TOOL]


class Trip:
    """The trip's store and tools, their effects recorded."""

    def __init__(self, store: AsyncStore) -> None:
        self.store = store
        self.booked: list[str] = []
        self.weather: list[str] = []

    async def book_flight(self, destination: str) -> str:
        """Book the trip's flight."""
        self.booked.append(destination)
        return f"booked a flight to {destination}"

    async def check_weather(self, destination: str) -> str:
        """The weather at the destination."""
        self.weather.append(destination)
        return f"weather at {destination}: sunny"

    async def verdicts(self) -> list[tuple[str, str]]:
        found = await find_decisions(self.store, source="gate")
        return sorted((d.verdict, d.reason) for d in found)


@pytest.fixture
async def trip(tmp_path: Path) -> AsyncIterator[Trip]:
    store = await open_async_store(f"sqlite:///{tmp_path / 'team.db'}")
    await store.own(REQ, "customer")
    await store.put(REQ, {"destination": "Lisbon"}, author="customer")
    yield Trip(store)
    await store.aclose()


@pytest.fixture
async def chats() -> AsyncIterator[AsyncEngine]:
    engine = create_async_engine("sqlite+aiosqlite://")
    yield engine
    await engine.dispose()


def fence_for(trip: Trip, **options: Any) -> PlanfenceMemoryBlock:
    return PlanfenceMemoryBlock(trip.store, POLICY, keys=[REQ], agent="booker", **options)


async def run(
    agent: Any, memory: Memory | None, ctx: Context | None = None
) -> tuple[str, list[ToolCallResult]]:
    handler = agent.run(user_msg=TASK, memory=memory, ctx=ctx)
    results = [ev async for ev in handler.stream_events() if isinstance(ev, ToolCallResult)]
    return str(await handler), results


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


async def test_a_stale_plan_is_an_error_tool_output_naming_the_change_and_the_replan_books(
    trip: Trip, chats: AsyncEngine
) -> None:
    shown: list[str] = []

    def answer(messages: Sequence[ChatMessage]) -> ChatMessage:
        shown.append(str(messages[0].content))
        results = tool_results(messages)
        if not results:
            return calls(("book_flight", "Lisbon"))
        if "refused" in results[-1]:
            return calls(("book_flight", "Porto"))
        return done(results[-1])

    async def revise_then_answer(
        messages: Sequence[ChatMessage], **_: Any
    ) -> AsyncIterator[ChatMessage]:
        if not tool_results(messages):  # the customer commits while the model thinks
            await trip.store.put(REQ, {"destination": "Porto"}, author="customer")
        yield answer(messages)

    fence = fence_for(trip)
    model = MockFunctionCallingLLM(response_generator=revise_then_answer)
    agent = FunctionAgent(tools=fence.tools([trip.book_flight]), llm=model)
    memory = Memory.from_defaults(memory_blocks=[fence], async_engine=chats)
    output, results = await run(agent, memory)
    await fence.aclose()

    assert output == "booked a flight to Porto"
    assert trip.booked == ["Porto"]
    refused, booked = (r.tool_output for r in results)
    assert refused.is_error and not booked.is_error
    assert f"{REQ} changed" in refused.content and '{"destination":"Porto"}' in refused.content
    assert refused.raw_output["verdict"] == "replan"
    assert refused.raw_output["reason"] == "stale_dependencies"
    # The records in the system message, read again after the refusal: Lisbon, then Porto.
    assert '"Lisbon"' in shown[0] and '"Porto"' in shown[1]
    assert await trip.verdicts() == [("allow", "current"), ("replan", "stale_dependencies")]


async def test_a_store_that_cannot_be_reached_is_a_block_and_the_model_is_told(
    tmp_path: Path, chats: AsyncEngine
) -> None:
    store = await open_async_store(f"sqlite:///{tmp_path / 'team.db'}")
    await store.aclose()  # before the run
    trip = Trip(store)
    system: list[str] = []

    def answer(messages: Sequence[ChatMessage]) -> ChatMessage:
        system.append(str(messages[0].content))
        return done() if tool_results(messages) else calls(("book_flight", "Lisbon"))

    fence = fence_for(trip)
    agent = FunctionAgent(tools=fence.tools([trip.book_flight]), llm=llm(answer))
    _, [result] = await run(agent, Memory.from_defaults(memory_blocks=[fence], async_engine=chats))
    assert trip.booked == []
    assert "cannot be read" in system[0]
    output = result.tool_output
    assert output.is_error
    assert (output.raw_output["verdict"], output.raw_output["reason"]) == (
        "block",
        "store_unavailable",
    )
    assert "This action will not run." in output.content


class Broken(Middleware):
    async def on_call_tool(self, call: ToolCall, call_next: CallNext) -> Judgement:
        raise RuntimeError("injected fault in the gate's middleware")


async def test_a_fault_in_the_gate_is_a_block_and_the_tool_does_not_run(
    trip: Trip, chats: AsyncEngine
) -> None:
    def answer(messages: Sequence[ChatMessage]) -> ChatMessage:
        return done() if tool_results(messages) else calls(("book_flight", "Lisbon"))

    fence = fence_for(trip, middleware=[Broken()])
    agent = FunctionAgent(tools=fence.tools([trip.book_flight]), llm=llm(answer))
    _, [result] = await run(agent, Memory.from_defaults(memory_blocks=[fence], async_engine=chats))
    await fence.aclose()
    assert trip.booked == []
    assert result.tool_output.is_error
    assert result.tool_output.raw_output["verdict"] == "block"


async def test_without_the_block_in_memory_gated_tools_are_blocked_and_ungated_run(
    trip: Trip,
) -> None:
    def answer(messages: Sequence[ChatMessage]) -> ChatMessage:
        if tool_results(messages):
            return done()
        return calls(("book_flight", "Lisbon"), ("check_weather", "Lisbon"))

    fence = fence_for(trip)
    tools = fence.tools([trip.book_flight, trip.check_weather])
    agent = FunctionAgent(tools=tools, llm=llm(answer))
    _, results = await run(agent, None)  # the agent's default memory: no records shown
    await fence.aclose()
    assert trip.booked == [] and trip.weather == ["Lisbon"]
    by_tool = {r.tool_name: r.tool_output for r in results}
    assert by_tool["book_flight"].raw_output["reason"] == "missing_plan"
    assert not by_tool["check_weather"].is_error


async def test_calls_of_one_answer_share_one_plan(trip: Trip, chats: AsyncEngine) -> None:
    booked_twice = Policy().declare("book_flight", depends_on=[REQ])

    def answer(messages: Sequence[ChatMessage]) -> ChatMessage:
        if tool_results(messages):
            return done()
        return calls(("book_flight", "Lisbon"), ("book_flight", "Lisbon"))

    fence = PlanfenceMemoryBlock(trip.store, booked_twice, keys=[REQ], agent="booker")
    agent = FunctionAgent(tools=fence.tools([trip.book_flight]), llm=llm(answer))
    await run(agent, Memory.from_defaults(memory_blocks=[fence], async_engine=chats))
    await fence.aclose()
    assert trip.booked == ["Lisbon", "Lisbon"]
    found = await find_decisions(trip.store, source="gate")
    assert [d.verdict for d in found] == ["allow", "allow"]
    assert len({d.plan for d in found}) == 1  # one answer, one plan


async def test_a_tool_that_takes_the_workflow_context_still_gets_it(
    trip: Trip, chats: AsyncEngine
) -> None:
    seen: list[Any] = []

    async def book_flight(ctx: Context, destination: str) -> str:
        """Book the trip's flight."""
        seen.append(ctx)
        return await trip.book_flight(destination)

    def answer(messages: Sequence[ChatMessage]) -> ChatMessage:
        return done() if tool_results(messages) else calls(("book_flight", "Lisbon"))

    fence = fence_for(trip)
    agent = FunctionAgent(tools=fence.tools([book_flight]), llm=llm(answer))
    _, [result] = await run(agent, Memory.from_defaults(memory_blocks=[fence], async_engine=chats))
    await fence.aclose()
    assert not result.tool_output.is_error, result.tool_output.content
    assert trip.booked == ["Lisbon"]
    assert len(seen) == 1 and isinstance(seen[0], Context)
    assert "ctx" not in result.tool_kwargs


# A `Memory` is not serialisable (with or without blocks): the workflow warns, and keeps it.
@pytest.mark.filterwarnings("ignore::workflows.context.state_store.UnserializableKeyWarning")
async def test_an_agent_workflow_and_a_continued_context(trip: Trip, chats: AsyncEngine) -> None:
    """In an `AgentWorkflow`, over a `Context` reused for a second run (the workflow serialises
    its state between runs: planfence keeps nothing there), each run plans and books."""

    def answer(messages: Sequence[ChatMessage]) -> ChatMessage:
        if tool_results(messages) and messages[-1].role == MessageRole.TOOL:
            return done(tool_results(messages)[-1])
        return calls(("book_flight", "Lisbon"))

    fence = fence_for(trip)
    booker = FunctionAgent(
        name="booker",
        description="Books flights.",
        tools=fence.tools([trip.book_flight]),
        llm=llm(answer),
    )
    workflow = AgentWorkflow(agents=[booker], root_agent="booker")
    memory = Memory.from_defaults(memory_blocks=[fence], async_engine=chats)
    ctx = Context(workflow)
    first, _ = await run(workflow, memory, ctx)
    second, _ = await run(workflow, memory, ctx)
    await fence.aclose()
    assert first == second == "booked a flight to Lisbon"
    assert trip.booked == ["Lisbon", "Lisbon"]
    assert await trip.verdicts() == [("allow", "current"), ("allow", "current")]


async def test_two_agents_in_one_workflow_each_with_their_own_block(
    trip: Trip, chats: AsyncEngine
) -> None:
    """A planner that checks the weather and hands off to a booker; each agent's tools behind
    its own block (own name, own plans), both blocks in the one shared memory."""
    planner_fence = PlanfenceMemoryBlock(
        trip.store, POLICY, keys=[REQ], agent="planner", name="planner_records"
    )
    booker_fence = fence_for(trip, name="booker_records")
    shown: list[str] = []

    def plan(messages: Sequence[ChatMessage]) -> ChatMessage:
        if not tool_results(messages):
            return calls(("check_weather", "Lisbon"))
        handoff = ToolCallBlock(
            tool_call_id="h",
            tool_name="handoff",
            tool_kwargs={"to_agent": "booker", "reason": "go"},
        )
        return ChatMessage(role=MessageRole.ASSISTANT, blocks=[handoff])

    def book(messages: Sequence[ChatMessage]) -> ChatMessage:
        shown.append(str(messages[0].content))
        if messages[-1].role == MessageRole.TOOL and "booked" in (messages[-1].content or ""):
            return done(messages[-1].content or "")
        return calls(("book_flight", "Lisbon"))

    planner = FunctionAgent(
        name="planner",
        description="Plans the trip.",
        tools=planner_fence.tools([trip.check_weather]),
        llm=llm(plan),
        can_handoff_to=["booker"],
    )
    booker = FunctionAgent(
        name="booker",
        description="Books flights.",
        tools=booker_fence.tools([trip.book_flight]),
        llm=llm(book),
    )
    workflow = AgentWorkflow(agents=[planner, booker], root_agent="planner")
    memory = Memory.from_defaults(memory_blocks=[planner_fence, booker_fence], async_engine=chats)
    output, _ = await run(workflow, memory)
    await planner_fence.aclose()
    await booker_fence.aclose()
    assert output == "booked a flight to Lisbon"
    assert trip.weather == ["Lisbon"] and trip.booked == ["Lisbon"]
    assert "<booker_records>" in shown[0] and "<planner_records>" in shown[0]
    [allow] = [d for d in await find_decisions(trip.store, tool="book_flight")]
    assert allow.verdict == "allow"
    assert (await trip.store.get(allow.plan)).author == "booker"  # the booker's own plan chain


# ReActAgent asks its step's context whether it is running, which the workflow deprecates.
@pytest.mark.filterwarnings("ignore:is_running called from within a step:DeprecationWarning")
async def test_a_react_agent_with_a_system_prompt_is_shown_the_records(
    trip: Trip, chats: AsyncEngine
) -> None:
    """`ReActAgent` folds the first system message into its own prompt; given a `system_prompt`,
    that is its own, and the records' message reaches the model."""
    shown: list[bool] = []
    action = 'Thought: book it\nAction: book_flight\nAction Input: {"destination": "Lisbon"}'

    def answer(messages: Sequence[ChatMessage]) -> ChatMessage:
        shown.append(any('{"destination":"Lisbon"}' in (m.content or "") for m in messages))
        observed = any("Observation: booked" in (m.content or "") for m in messages)
        return done("Thought: done\nAnswer: booked") if observed else done(action)

    fence = fence_for(trip)
    agent = ReActAgent(
        tools=fence.tools([trip.book_flight]), llm=llm(answer), system_prompt="You book flights."
    )
    output, [result] = await run(
        agent, Memory.from_defaults(memory_blocks=[fence], async_engine=chats)
    )
    await fence.aclose()
    assert output == "booked"
    assert not result.tool_output.is_error, result.tool_output.content
    assert trip.booked == ["Lisbon"]
    assert shown and all(shown)
    assert await trip.verdicts() == [("allow", "current")]


async def test_runs_at_once_keep_plan_chains_of_their_own(trip: Trip) -> None:
    """Two runs of one agent and one block, their model calls interleaved: neither run's plan
    supersedes the other's."""
    arrived: list[None] = []
    both = asyncio.Event()

    async def respond(messages: Sequence[ChatMessage], **_: Any) -> AsyncIterator[ChatMessage]:
        if tool_results(messages):
            yield done()
            return
        arrived.append(None)
        if len(arrived) == 2:
            both.set()
        await asyncio.wait_for(both.wait(), 10)  # both runs were shown the records
        yield calls(("book_flight", "Lisbon"))

    fence = fence_for(trip)
    model = MockFunctionCallingLLM(response_generator=respond)
    agent = FunctionAgent(tools=fence.tools([trip.book_flight]), llm=model)
    engines = [create_async_engine("sqlite+aiosqlite://") for _ in range(2)]
    try:
        memories = [Memory.from_defaults(memory_blocks=[fence], async_engine=e) for e in engines]
        await asyncio.gather(*(run(agent, m) for m in memories))
    finally:
        for engine in engines:
            await engine.dispose()
    await fence.aclose()
    assert trip.booked == ["Lisbon", "Lisbon"]
    found = await find_decisions(trip.store, source="gate")
    assert [d.verdict for d in found] == ["allow", "allow"]
    plans = [await trip.store.get(d.plan) for d in found if d.plan]
    assert len({p.id for p in plans}) == 2
    assert [p.supersedes for p in plans] == [None, None]


async def test_a_tool_given_without_the_gate_stops_the_run_before_the_model_is_called(
    trip: Trip, chats: AsyncEngine
) -> None:
    asked: list[int] = []

    def answer(messages: Sequence[ChatMessage]) -> ChatMessage:
        asked.append(1)
        if tool_results(messages):
            return done()
        return calls(("book_flight", "Lisbon"))

    fence = fence_for(trip)
    # book_flight is given as it is, check_weather (ungated) behind the gate
    tools = [trip.book_flight, *fence.tools([trip.check_weather])]
    for agent in (
        FunctionAgent(tools=tools, llm=llm(answer)),
        AgentWorkflow(agents=[FunctionAgent(name="booker", tools=tools, llm=llm(answer))]),
    ):
        with pytest.raises(ConfigError, match="book_flight"):
            await run(agent, Memory.from_defaults(memory_blocks=[fence], async_engine=chats))
    await fence.aclose()
    assert trip.booked == [] and asked == []


async def test_an_ungated_tool_may_be_given_without_the_gate(
    trip: Trip, chats: AsyncEngine
) -> None:
    def answer(messages: Sequence[ChatMessage]) -> ChatMessage:
        if tool_results(messages):
            return done()
        return calls(("check_weather", "Lisbon"))

    fence = fence_for(trip)
    tools = [*fence.tools([trip.book_flight]), trip.check_weather]
    agent = FunctionAgent(tools=tools, llm=llm(answer))
    await run(agent, Memory.from_defaults(memory_blocks=[fence], async_engine=chats))
    await fence.aclose()
    assert trip.weather == ["Lisbon"]
