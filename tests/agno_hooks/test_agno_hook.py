"""The Agno docs example runs as written, and `PlanfenceToolHook` behaves the Agno way: records
in the run's system message (kept current after each tool call), refusals as the tool's error
result (`RetryAgentRun` for a replan, `AgentRunException` with the payload for a block), faults
as blocks, in sync and async runs."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from agno.agent import Agent
from agno.models.base import Model
from agno.models.message import Message
from agno.models.response import ModelResponse
from docpages import block

from planfence.adapters.agno import PlanfenceToolHook
from planfence.fence import current
from planfence.plugins.gate import Middleware, Policy, find_decisions_sync
from planfence.shared_memory import open_async_store, open_store

PAGE = "docs/frameworks/agno.md"
REQ = "trip/42/requirements"
POLICY = Policy().declare("book_flight", depends_on=[REQ]).declare("book_hotel", depends_on=[REQ])
TASK = "Book the flight for trip 42."

Step = str | list[tuple[str, dict[str, Any]]]  # a text answer, or the tool calls of one response


@dataclass
class Scripted(Model):
    """A model whose answers come from `answer(messages)`; it keeps every system message and
    tool result it read."""

    id: str = "scripted"
    answer: Callable[[list[Message]], Step] = lambda messages: "Done."
    systems: list[str] = field(default_factory=list)
    results: list[Message] = field(default_factory=list)
    uses: int = 0

    def invoke(self, messages: list[Message], *args: Any, **kwargs: Any) -> ModelResponse:
        self.systems.append(str(messages[0].content) if messages[0].role == "system" else "")
        if messages[-1].role == "tool":
            done = [m for m in reversed(messages) if m.role == "tool"]
            self.results += reversed(done[: len(done) - len(self.results)])
        step = self.answer(messages)
        if isinstance(step, str):
            return ModelResponse(role="assistant", content=step)
        calls = []
        for name, args in step:
            self.uses += 1
            function = {"name": name, "arguments": json.dumps(args)}
            calls.append({"id": f"call-{self.uses}", "type": "function", "function": function})
        return ModelResponse(role="assistant", tool_calls=calls)

    async def ainvoke(self, *args: Any, **kwargs: Any) -> ModelResponse:
        return self.invoke(*args, **kwargs)

    def invoke_stream(self, *args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError

    def ainvoke_stream(self, *args: Any, **kwargs: Any) -> Any:
        raise NotImplementedError

    def _parse_provider_response(self, response: Any, **kwargs: Any) -> ModelResponse:
        return response  # type: ignore[no-any-return]

    def _parse_provider_response_delta(self, response: Any) -> ModelResponse:
        return response  # type: ignore[no-any-return]


def shown_destination(messages: list[Message]) -> str:
    return str(messages[0].content).split('"destination":"')[-1].split('"')[0]


def last_tool(messages: list[Message]) -> Message | None:
    return messages[-1] if messages[-1].role == "tool" else None


def trip_store(url: str = "memory://") -> Any:
    store = open_store(url)
    store.own(REQ, "customer")
    store.put(REQ, {"destination": "Lisbon"}, author="customer")
    return store


def agent_with(fence: PlanfenceToolHook, model: Scripted, tools: list[Any]) -> Agent:
    return Agent(
        model=model,
        tools=tools,
        tool_hooks=[fence],
        instructions=fence.instructions("You book flights."),
        telemetry=False,
    )


def booking(booked: list[str]) -> Any:
    """A sync `book_flight` tool that records each destination it books in `booked`."""

    def book_flight(destination: str) -> str:
        """Book the trip's flight."""
        booked.append(destination)
        return f"booked a flight to {destination}"

    return book_flight


def lisbon_then(final: str) -> Any:
    """A model's answers: book a flight to Lisbon, then, once a tool result is in, `final`."""

    def answer(messages: list[Message]) -> Step:
        if last_tool(messages) is not None:
            return final
        return [("book_flight", {"destination": "Lisbon"})]

    return answer


def verdicts(store: Any) -> list[tuple[str, str]]:
    return sorted((d.verdict, d.reason) for d in find_decisions_sync(store, source="gate"))


def test_the_docs_example_runs(capsys: Any, tmp_path: Path) -> None:
    code = block(PAGE, "Example")
    url = f"sqlite:///{tmp_path / 'team.db'}"  # the example closes its store: read it back after
    code = code.replace('open_store("memory://")', f"open_store({url!r})")
    exec(compile(code, PAGE, "exec", dont_inherit=True), {"__name__": "docs"})
    assert capsys.readouterr().out.strip() == "Booked."
    store = open_store(url)
    try:
        [allow] = find_decisions_sync(store, source="gate")  # the tool ran: it was allowed
        assert (allow.verdict, allow.reason, allow.tool) == ("allow", "current", "book_flight")
        assert store.get(allow.plan).parents == (store.head(REQ),)  # cites exactly what was shown
    finally:
        store.close()


def test_a_stale_plan_is_a_tool_error_and_the_redone_call_plans_from_the_new_records() -> None:
    store = trip_store()
    booked: list[str] = []

    book_flight = booking(booked)

    def answer(messages: list[Message]) -> Step:
        result = last_tool(messages)
        if result is not None and not result.tool_call_error:
            return "Booked."
        if result is None:  # the customer moves the trip while the model plans
            store.put(REQ, {"destination": "Porto"}, author="customer")
        return [("book_flight", {"destination": shown_destination(messages)})]

    model = Scripted(answer=answer)
    fence = PlanfenceToolHook(store, POLICY, keys=[REQ], agent="booker")
    try:
        assert agent_with(fence, model, [book_flight]).run(TASK).content == "Booked."
        assert booked == ["Porto"]
        refusal = model.results[0]
        assert refusal.tool_call_error is True
        text = str(refusal.content)
        assert text.startswith("planfence refused book_flight")
        assert f"{REQ} changed" in text and '{"destination":"Porto"}' in text
        # The run's system message, built once, was kept current: Lisbon, then Porto.
        assert ['"Lisbon"' in s for s in model.systems] == [True, False, False]
        assert ['"Porto"' in s for s in model.systems] == [False, True, True]
        assert all(s.startswith("You book flights.") for s in model.systems)
        fence.close()
        assert verdicts(store) == [("allow", "current"), ("replan", "stale_dependencies")]
    finally:
        store.close()


async def test_a_block_is_a_tool_error_with_the_refusal_payload_and_the_run_goes_on() -> None:
    store = trip_store()
    booked: list[str] = []
    moves = iter(["Porto", "Madrid"])

    async def book_flight(destination: str) -> str:
        """Book the trip's flight."""
        booked.append(destination)
        return f"booked a flight to {destination}"

    def answer(messages: list[Message]) -> Step:
        result = last_tool(messages)
        if result is not None and "will not run" in str(result.content):
            return "Not booked."
        store.put(REQ, {"destination": next(moves)}, author="customer")
        return [("book_flight", {"destination": shown_destination(messages)})]

    model = Scripted(answer=answer)
    fence = PlanfenceToolHook(store, POLICY, keys=[REQ], agent="booker")
    try:
        done = await agent_with(fence, model, [book_flight]).arun(TASK)
        assert done.content == "Not booked."
        assert booked == []
        blocked = model.results[-1]
        assert blocked.tool_call_error is True
        words, payload = str(blocked.content).split("\n{", 1)
        assert "stale_after_replan" in words
        wire = json.loads("{" + payload)
        assert (wire["verdict"], wire["reason"]) == ("block", "stale_after_replan")
    finally:
        await fence.aclose()
        store.close()


async def test_a_closed_store_is_a_store_unavailable_block_not_an_exception(
    tmp_path: Path,
) -> None:
    store = await open_async_store(f"sqlite:///{tmp_path / 'team.db'}")
    await store.aclose()  # before the run
    booked: list[str] = []

    async def book_flight(destination: str) -> str:
        """Book the trip's flight."""
        booked.append(destination)
        return f"booked a flight to {destination}"

    answer = lisbon_then("Not booked.")

    model = Scripted(answer=answer)
    fence = PlanfenceToolHook(store, POLICY, keys=[REQ], agent="booker")
    done = await agent_with(fence, model, [book_flight]).arun(TASK)
    assert done.content == "Not booked."
    assert booked == []
    assert "cannot be read" in model.systems[0]
    [blocked] = model.results
    assert blocked.tool_call_error is True
    assert '"reason": "store_unavailable"' in str(blocked.content)
    await fence.aclose()


class Broken(Middleware):
    async def on_call_tool(self, call: Any, call_next: Any) -> Any:
        raise RuntimeError("injected fault in the gate's middleware")


def test_a_fault_in_the_gate_is_a_block_the_model_reads() -> None:
    store = trip_store()
    booked: list[str] = []

    book_flight = booking(booked)

    answer = lisbon_then("Not booked.")

    model = Scripted(answer=answer)
    fence = PlanfenceToolHook(store, POLICY, keys=[REQ], agent="booker", middleware=[Broken()])
    try:
        assert agent_with(fence, model, [book_flight]).run(TASK).content == "Not booked."
        assert booked == []
        [blocked] = model.results
        assert blocked.tool_call_error is True
        assert '"verdict": "block"' in str(blocked.content)
    finally:
        fence.close()
        store.close()


async def test_the_calls_of_one_response_share_its_plan_and_each_holds_its_own_token() -> None:
    store = trip_store()
    tokens: dict[str, Any] = {}

    async def book_flight(destination: str) -> str:
        """Book the trip's flight (async: Agno awaits it on the run's loop)."""
        tokens["book_flight"] = current()
        return f"booked a flight to {destination}"

    def book_hotel(destination: str) -> str:
        """Book the trip's hotel (sync: Agno runs it in a worker thread)."""
        tokens["book_hotel"] = current()
        return f"booked a hotel in {destination}"

    def answer(messages: list[Message]) -> Step:
        if last_tool(messages) is not None:
            return "Booked."
        where = {"destination": shown_destination(messages)}
        return [("book_flight", where), ("book_hotel", where)]

    fence = PlanfenceToolHook(store, POLICY, keys=[REQ], agent="booker")
    try:
        await agent_with(fence, Scripted(answer=answer), [book_flight, book_hotel]).arun(TASK)
        assert {name: t.tool for name, t in tokens.items()} == {
            "book_flight": "book_flight",
            "book_hotel": "book_hotel",
        }
        await fence.aclose()
        allows = find_decisions_sync(store, source="gate")
        assert sorted(d.tool or "" for d in allows) == ["book_flight", "book_hotel"]
        assert len({d.plan for d in allows}) == 1  # one plan for the response's two calls
    finally:
        store.close()


def test_an_agent_whose_instructions_show_no_records_has_its_gated_calls_blocked() -> None:
    store = trip_store()
    booked: list[str] = []

    book_flight = booking(booked)

    answer = lisbon_then("Not booked.")

    model = Scripted(answer=answer)
    fence = PlanfenceToolHook(store, POLICY, keys=[REQ], agent="booker")
    agent = Agent(model=model, tools=[book_flight], tool_hooks=[fence], telemetry=False)
    try:
        agent.run(TASK)  # the fence gates, but was not given the instructions to show records
        assert booked == []
        [blocked] = model.results
        assert '"reason": "missing_plan"' in str(blocked.content)
    finally:
        fence.close()
        store.close()


async def test_the_instructions_without_the_hook_stop_the_run_before_any_tool_runs() -> None:
    store = trip_store()
    booked: list[str] = []

    book_flight = booking(booked)

    answer = lisbon_then("Booked.")

    fence = PlanfenceToolHook(store, POLICY, keys=[REQ], agent="booker")
    model = Scripted(answer=answer)
    try:
        for hooks in (None, [lambda function_name, function_call, arguments: None]):
            agent = Agent(
                model=model,
                tools=[book_flight],
                tool_hooks=hooks,
                instructions=fence.instructions("You book flights."),
                telemetry=False,
            )
            for done in (agent.run(TASK), await agent.arun(TASK)):
                assert done.status == "ERROR"
                assert "tool_hooks" in str(done.content)
        assert booked == []
        assert model.systems == []  # the model was never called
    finally:
        await fence.aclose()
        store.close()
