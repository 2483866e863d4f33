"""The Strands Agents docs example runs as written, and `PlanfenceHookProvider` behaves the
Strands way: records in the system prompt before each model call, refusals as cancelled tool
calls (error tool results the model reads), faults as blocks, interrupts resumed on their plan."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncGenerator, Callable
from pathlib import Path
from typing import Any

import pytest
from docpages import block
from strands import Agent, tool
from strands.hooks import BeforeToolCallEvent, HookProvider, HookRegistry
from strands.models import Model

from planfence.adapters.strands import PlanfenceHookProvider
from planfence.fence import current
from planfence.plugins.gate import Middleware, Policy, find_decisions_sync
from planfence.shared_memory import open_async_store, open_store

PAGE = "docs/frameworks/strands.md"
REQ = "trip/42/requirements"
POLICY = Policy().declare("book_flight", depends_on=[REQ]).declare("book_hotel", depends_on=[REQ])
TASK = "Book the flight for trip 42."

Step = str | list[tuple[str, dict[str, Any]]]  # a text answer, or the tool uses of one message


class Scripted(Model):
    """A model whose answers come from `answer(system_prompt, messages)`; it keeps what it was
    shown."""

    def __init__(self, answer: Callable[[str, list[Any]], Step]) -> None:
        self.answer = answer
        self.prompts: list[str] = []
        self.results: list[dict[str, Any]] = []  # every tool result it read, in order
        self.uses = 0

    def update_config(self, **config: Any) -> None:
        pass

    def get_config(self) -> Any:
        return {}

    def structured_output(self, *args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError

    async def stream(
        self, messages: Any, tool_specs: Any = None, system_prompt: str | None = None, **kw: Any
    ) -> AsyncGenerator[Any, None]:
        self.prompts.append(system_prompt or "")
        last = messages[-1]["content"] if messages[-1]["role"] == "user" else []
        self.results += [c["toolResult"] for c in last if "toolResult" in c]
        step = self.answer(system_prompt or "", messages)
        yield {"messageStart": {"role": "assistant"}}
        if isinstance(step, str):
            yield {"contentBlockStart": {"start": {}}}
            yield {"contentBlockDelta": {"delta": {"text": step}}}
            yield {"contentBlockStop": {}}
            yield {"messageStop": {"stopReason": "end_turn"}}
            return
        for name, args in step:
            self.uses += 1
            use = {"toolUseId": f"call-{self.uses}", "name": name}
            yield {"contentBlockStart": {"start": {"toolUse": use}}}
            yield {"contentBlockDelta": {"delta": {"toolUse": {"input": json.dumps(args)}}}}
            yield {"contentBlockStop": {}}
        yield {"messageStop": {"stopReason": "tool_use"}}


def shown_destination(system_prompt: str) -> str:
    return system_prompt.split('"destination":"')[-1].split('"')[0]


def last_result(messages: list[Any]) -> dict[str, Any] | None:
    content = messages[-1]["content"] if messages[-1]["role"] == "user" else []
    found = [c["toolResult"] for c in content if "toolResult" in c]
    return found[-1] if found else None


def trip_store(url: str = "memory://") -> Any:
    store = open_store(url)
    store.own(REQ, "customer")
    store.put(REQ, {"destination": "Lisbon"}, author="customer")
    return store


def booker(booked: list[str]) -> Any:
    @tool
    def book_flight(destination: str) -> str:
        """Book the trip's flight."""
        booked.append(destination)
        return f"booked a flight to {destination}"

    return book_flight


def verdicts(store: Any) -> list[tuple[str, str]]:
    return sorted((d.verdict, d.reason) for d in find_decisions_sync(store, source="gate"))


def test_the_docs_example_runs(capsys: Any, tmp_path: Path) -> None:
    code = block(PAGE, "Example")
    url = f"sqlite:///{tmp_path / 'team.db'}"  # the example closes its store: read it back after
    code = code.replace('open_store("memory://")', f"open_store({url!r})")
    exec(compile(code, PAGE, "exec"), {"__name__": "docs"})
    assert capsys.readouterr().out.strip() == "Booked."
    store = open_store(url)
    try:
        [allow] = find_decisions_sync(store, source="gate")
        assert (allow.verdict, allow.reason) == ("allow", "current")
        assert store.get(allow.plan).parents == (store.head(REQ),)  # cites exactly what was shown
    finally:
        store.close()


def test_a_stale_plan_is_a_cancelled_call_the_model_reads_and_redoes() -> None:
    store = trip_store()
    booked: list[str] = []

    def answer(system_prompt: str, messages: list[Any]) -> Step:
        result = last_result(messages)
        if result is not None and result["status"] == "success":
            return "Booked."
        if result is None:  # the customer moves the trip while the model plans
            store.put(REQ, {"destination": "Porto"}, author="customer")
        return [("book_flight", {"destination": shown_destination(system_prompt)})]

    model = Scripted(answer)
    fence = PlanfenceHookProvider(store, POLICY, keys=[REQ], agent="booker")
    agent = Agent(
        model=model,
        tools=[booker(booked)],
        hooks=[fence],
        system_prompt="You book flights.",
        callback_handler=None,
    )
    try:
        assert str(agent(TASK)).strip() == "Booked."
        assert booked == ["Porto"]
        refusal = model.results[0]
        assert refusal["status"] == "error"
        [text] = [c["text"] for c in refusal["content"]]
        assert text.startswith("planfence refused book_flight")
        assert f"{REQ} changed" in text and '{"destination":"Porto"}' in text
        # Each call showed the agent's prompt and one records block, the current one.
        assert [p.count("Current public records") for p in model.prompts] == [1, 1, 1]
        assert all(p.startswith("You book flights.\n") for p in model.prompts)
        assert '"Lisbon"' in model.prompts[0] and '"Porto"' in model.prompts[1]
        assert agent.system_prompt == "You book flights."  # the records are out between calls
        fence.close()
        assert verdicts(store) == [("allow", "current"), ("replan", "stale_dependencies")]
    finally:
        store.close()


def test_a_block_is_an_error_result_with_the_refusal_payload_and_the_run_goes_on() -> None:
    store = trip_store()
    booked: list[str] = []
    moves = iter(["Porto", "Madrid"])

    def answer(system_prompt: str, messages: list[Any]) -> Step:
        result = last_result(messages)
        if result is not None and "will not run" in result["content"][0]["text"]:
            return "Not booked."
        store.put(REQ, {"destination": next(moves)}, author="customer")
        return [("book_flight", {"destination": shown_destination(system_prompt)})]

    model = Scripted(answer)
    fence = PlanfenceHookProvider(store, POLICY, keys=[REQ], agent="booker")
    agent = Agent(model=model, tools=[booker(booked)], hooks=[fence], callback_handler=None)
    try:
        assert str(agent(TASK)).strip() == "Not booked."
        assert booked == []
        blocked = model.results[-1]
        assert blocked["status"] == "error"
        words, payload = blocked["content"][0]["text"].split("\n{", 1)
        assert "stale_after_replan" in words
        wire = json.loads("{" + payload)
        assert (wire["verdict"], wire["reason"], wire["tool"]) == (
            "block",
            "stale_after_replan",
            "book_flight",
        )
    finally:
        fence.close()
        store.close()


async def test_a_closed_store_is_a_store_unavailable_block_not_an_exception(
    tmp_path: Path,
) -> None:
    store = await open_async_store(f"sqlite:///{tmp_path / 'team.db'}")
    await store.aclose()  # before the run
    booked: list[str] = []

    def answer(system_prompt: str, messages: list[Any]) -> Step:
        if last_result(messages) is not None:
            return "Not booked."
        return [("book_flight", {"destination": "Lisbon"})]

    model = Scripted(answer)
    fence = PlanfenceHookProvider(store, POLICY, keys=[REQ], agent="booker")
    agent = Agent(model=model, tools=[booker(booked)], hooks=[fence], callback_handler=None)
    assert str(await agent.invoke_async(TASK)).strip() == "Not booked."
    assert booked == []
    assert "cannot be read" in model.prompts[0]
    [blocked] = model.results
    assert blocked["status"] == "error"
    assert '"reason": "store_unavailable"' in blocked["content"][0]["text"]
    await fence.aclose()


class Broken(Middleware):
    async def on_call_tool(self, call: Any, call_next: Any) -> Any:
        raise RuntimeError("injected fault in the gate's middleware")


async def test_a_fault_in_the_gate_is_a_block_the_model_reads() -> None:
    store = trip_store()
    booked: list[str] = []

    def answer(system_prompt: str, messages: list[Any]) -> Step:
        if last_result(messages) is not None:
            return "Not booked."
        return [("book_flight", {"destination": "Lisbon"})]

    model = Scripted(answer)
    fence = PlanfenceHookProvider(store, POLICY, keys=[REQ], agent="booker", middleware=[Broken()])
    agent = Agent(model=model, tools=[booker(booked)], hooks=[fence], callback_handler=None)
    try:
        assert str(await agent.invoke_async(TASK)).strip() == "Not booked."
        assert booked == []
        [blocked] = model.results
        assert blocked["status"] == "error"
        assert '"verdict": "block"' in blocked["content"][0]["text"]
    finally:
        await fence.aclose()
        store.close()


class CancelsBookings(HookProvider):
    """Another hook provider, listed after the fence: it cancels every booking itself."""

    def register_hooks(self, registry: HookRegistry, **kwargs: Any) -> None:
        registry.add_callback(BeforeToolCallEvent, self.cancel)

    def cancel(self, event: BeforeToolCallEvent) -> None:
        event.cancel_tool = "bookings are closed today"


async def test_the_gate_judges_after_the_other_hooks_and_not_a_call_they_cancelled() -> None:
    store = trip_store()
    booked: list[str] = []

    def answer(system_prompt: str, messages: list[Any]) -> Step:
        if last_result(messages) is not None:
            return "Not booked."
        return [("book_flight", {"destination": "Lisbon"})]

    model = Scripted(answer)
    fence = PlanfenceHookProvider(store, POLICY, keys=[REQ], agent="booker")
    hooks = [fence, CancelsBookings()]
    agent = Agent(model=model, tools=[booker(booked)], hooks=hooks, callback_handler=None)
    try:
        await agent.invoke_async(TASK)
        assert booked == []
        assert model.results[0]["content"][0]["text"] == "bookings are closed today"
        await fence.aclose()
        assert verdicts(store) == []  # the cancelled call was not judged
    finally:
        store.close()


async def test_tool_uses_run_side_by_side_each_with_its_own_fencing_token() -> None:
    store = trip_store()
    tokens: dict[str, Any] = {}

    @tool
    async def book_flight(destination: str) -> str:
        """Book the trip's flight."""
        tokens["book_flight"] = current()
        return f"booked a flight to {destination}"

    @tool
    async def book_hotel(destination: str) -> str:
        """Book the trip's hotel."""
        tokens["book_hotel"] = current()
        return f"booked a hotel in {destination}"

    def answer(system_prompt: str, messages: list[Any]) -> Step:
        if last_result(messages) is not None:
            return "Booked."
        where = {"destination": shown_destination(system_prompt)}
        return [("book_flight", where), ("book_hotel", where)]

    fence = PlanfenceHookProvider(store, POLICY, keys=[REQ], agent="booker")
    agent = Agent(
        model=Scripted(answer),
        tools=[book_flight, book_hotel],
        hooks=[fence],
        callback_handler=None,
    )
    try:
        await agent.invoke_async(TASK)
        assert {name: t.tool for name, t in tokens.items()} == {
            "book_flight": "book_flight",
            "book_hotel": "book_hotel",
        }
        assert current() is None  # nothing stays bound after the calls
        await fence.aclose()
        assert verdicts(store) == [("allow", "current"), ("allow", "current")]
    finally:
        store.close()


class Approval(HookProvider):
    """Asks a person before the first booking (a Strands interrupt)."""

    def register_hooks(self, registry: HookRegistry, **kwargs: Any) -> None:
        registry.add_callback(BeforeToolCallEvent, self.ask)

    def ask(self, event: BeforeToolCallEvent) -> None:
        if event.tool_use["toolUseId"] == "call-1":
            event.interrupt("approve", reason="book this flight?")


@pytest.mark.parametrize("moved", [False, True], ids=["unchanged", "moved"])
async def test_a_call_resumed_after_an_interrupt_is_judged_on_the_plan_it_was_made_from(
    moved: bool,
) -> None:
    store = trip_store()
    booked: list[str] = []

    def answer(system_prompt: str, messages: list[Any]) -> Step:
        result = last_result(messages)
        if result is not None and result["status"] == "success":
            return "Booked."
        return [("book_flight", {"destination": shown_destination(system_prompt)})]

    fence = PlanfenceHookProvider(store, POLICY, keys=[REQ], agent="booker")
    agent = Agent(
        model=Scripted(answer),
        tools=[booker(booked)],
        hooks=[Approval(), fence],
        callback_handler=None,
    )
    try:
        paused = await agent.invoke_async(TASK)
        assert paused.stop_reason == "interrupt"
        assert booked == []
        assert verdicts(store) == []  # the waiting call was not judged
        if moved:  # the customer moves the trip while the person decides
            store.put(REQ, {"destination": "Porto"}, author="customer")
        answers = [
            {"interruptResponse": {"interruptId": i.id, "response": "yes"}}
            for i in paused.interrupts or []
        ]
        assert str(await agent.invoke_async(answers)).strip() == "Booked."
        await fence.aclose()
        if moved:  # refused on the plan from before the interrupt, then redone from Porto
            assert booked == ["Porto"]
            assert verdicts(store) == [("allow", "current"), ("replan", "stale_dependencies")]
        else:
            assert booked == ["Lisbon"]
            assert verdicts(store) == [("allow", "current")]
    finally:
        store.close()


async def test_one_provider_fences_two_agents_running_side_by_side_each_on_its_own_plans() -> None:
    store = trip_store()
    booked: list[str] = []

    def answer(system_prompt: str, messages: list[Any]) -> Step:
        if last_result(messages) is not None:
            return "Booked."
        return [("book_flight", {"destination": shown_destination(system_prompt)})]

    fence = PlanfenceHookProvider(store, POLICY, keys=[REQ], agent="booker")
    agents = [
        Agent(model=Scripted(answer), tools=[booker(booked)], hooks=[fence], callback_handler=None)
        for _ in range(2)
    ]
    try:
        await asyncio.gather(*(a.invoke_async(TASK) for a in agents))
        assert booked == ["Lisbon", "Lisbon"]
        await fence.aclose()
        allows = find_decisions_sync(store, source="gate")
        assert [(d.verdict, d.reason) for d in allows] == [("allow", "current")] * 2
        assert len({d.plan for d in allows}) == 2  # a plan each, from what each was shown
    finally:
        store.close()


def test_a_direct_tool_call_goes_through_the_gate_and_without_a_plan_does_not_run() -> None:
    store = trip_store()
    booked: list[str] = []
    fence = PlanfenceHookProvider(store, POLICY, keys=[REQ], agent="booker")
    model = Scripted(answer=lambda messages: "Done.")
    agent = Agent(model=model, tools=[booker(booked)], hooks=[fence], callback_handler=None)
    try:
        result = agent.tool.book_flight(destination="Lisbon")  # no model, no plan
        assert booked == []
        assert result["status"] == "error"
        assert "(missing_plan)" in str(result["content"])
        fence.close()
        assert verdicts(store) == [("block", "missing_plan")]
    finally:
        store.close()
