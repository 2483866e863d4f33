"""The Microsoft Agent Framework page's snippet runs as written (with a scripted chat client
built on the framework's own client layers), and refusals reach the model the framework's way:
a replan as the tool's result, a block as `MiddlewareTermination` ending the run."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from agent_framework import Agent, ChatResponse, Content, Message
from docpages import block

from planfence.adapters.maf import PlanfenceFunctionMiddleware
from planfence.adapters.maf.conformance import ScriptedClient
from planfence.plugins.gate import Policy, find_decisions_sync, parse_payload
from planfence.shared_memory import open_async_store, open_store

PAGE = "docs/frameworks/maf.md"
REQ = "trip/42/requirements"
Answer = Callable[[Sequence[Message], Mapping[str, Any]], Message]


class Client(ScriptedClient):
    """A chat client that answers with `answer(messages, options)` and keeps what it saw."""

    def __init__(self, answer: Answer) -> None:
        super().__init__(script=None)  # type: ignore[arg-type]
        self.reply = answer
        self.seen: list[tuple[list[Message], str]] = []

    async def _answer(self, messages: Sequence[Message], options: Mapping[str, Any]) -> Any:
        self.seen.append((list(messages), str(options.get("instructions") or "")))
        return ChatResponse(messages=[self.reply(messages, options)])


def book(destination: str, n: int = 0) -> Message:
    args = json.dumps({"destination": destination})
    call = Content.from_function_call(call_id=f"c{n}", name="book_flight", arguments=args)
    return Message(role="assistant", contents=[call])


def results(messages: Sequence[Message]) -> list[Content]:
    return [c for m in messages for c in m.contents if c.type == "function_result"]


def text_of(result: Content) -> str:
    return str(result.result)


def test_maf_page_snippet_runs(capsys: Any, tmp_path: Path) -> None:
    def answer(messages: Sequence[Message], options: Mapping[str, Any]) -> Message:
        if messages[-1].role == "tool":
            return Message(role="assistant", contents=["Booked."])
        return book("Lisbon")

    client = Client(answer)
    code = block(PAGE, "Add planfence to a Microsoft Agent Framework agent")
    # The snippet closes its store: on a file, what it wrote can be read back after.
    url = f"sqlite:///{tmp_path / 'team.db'}"
    code = code.replace('open_store("memory://")', f"open_store({url!r})")
    namespace: dict[str, Any] = {"__name__": "snippet", "client": client}
    exec(compile(code, PAGE, "exec"), namespace)
    store = open_store(url)
    try:
        assert capsys.readouterr().out.strip() == "Booked."
        [allow] = find_decisions_sync(store, source="gate")
        assert (allow.verdict, allow.reason) == ("allow", "current")
        plan = store.get(allow.plan)
        assert plan.parents == (store.head(REQ),)  # the plan cites exactly what was shown
        assert '{"destination":"Lisbon"}' in client.seen[0][1]  # shown in the instructions
    finally:
        store.close()


def fenced(answer: Answer, booked: list[str]) -> tuple[Any, Agent, Client]:
    store = open_store("memory://")
    store.own(REQ, "customer")
    store.put(REQ, {"destination": "Lisbon"}, author="customer")

    def book_flight(destination: str) -> str:
        """Book the trip's flight."""
        booked.append(destination)
        return f"booked a flight to {destination}"

    policy = Policy().declare("book_flight", depends_on=[REQ])
    fence = PlanfenceFunctionMiddleware(store, policy, keys=[REQ], agent="booker")
    client = Client(answer)
    agent = Agent(client, tools=[book_flight], context_providers=[fence], middleware=[fence])
    return store, agent, client


def audited(store: Any, agent: Agent) -> list[Any]:
    """The gate's journal once the fence wrote the allows its deferred audit queued."""
    for fence in agent.context_providers:
        if isinstance(fence, PlanfenceFunctionMiddleware):
            fence.close()
    return find_decisions_sync(store, source="gate")


def test_a_replan_is_the_tools_result_and_a_second_refusal_ends_the_run() -> None:
    booked: list[str] = []
    moves = iter(["Porto", "Madrid"])

    def answer(messages: Sequence[Message], options: Mapping[str, Any]) -> Message:
        store.put(REQ, {"destination": next(moves)}, author="customer")  # while it thinks
        return book("Lisbon" if len(messages) == 1 else "Porto", len(messages))

    store, agent, client = fenced(answer, booked)
    try:
        response = asyncio.run(agent.run("Book the flight for trip 42."))
        assert booked == []
        replan, block = results(response.messages)
        assert f"{REQ} changed" in text_of(replan) and "Porto" in text_of(replan)
        assert "stale_after_replan" in text_of(block)
        # The block ended the run: the model was asked twice, never after the block.
        assert len(client.seen) == 2
        [item] = block.items or []
        payload = parse_payload(item.additional_properties["planfence"])
        assert (payload.verdict, payload.reason) == ("block", "stale_after_replan")
        verdicts = [d.verdict for d in audited(store, agent)]
        assert sorted(verdicts) == ["block", "replan"]
    finally:
        store.close()


def test_each_run_starts_its_own_plan_chain() -> None:
    booked: list[str] = []

    def answer(messages: Sequence[Message], options: Mapping[str, Any]) -> Message:
        if messages[-1].role == "tool":
            return Message(role="assistant", contents=["Booked."])
        return book("Lisbon")

    store, agent, _ = fenced(answer, booked)
    try:
        for _ in range(2):
            asyncio.run(agent.run("Book the flight for trip 42."))
        assert booked == ["Lisbon", "Lisbon"]
        plans = [store.get(d.plan) for d in audited(store, agent)]
        assert len({p.id for p in plans}) == 2  # one plan per run, both allowed
    finally:
        store.close()


def test_parallel_calls_of_one_answer_act_under_one_plan() -> None:
    booked: list[str] = []

    def answer(messages: Sequence[Message], options: Mapping[str, Any]) -> Message:
        if messages[-1].role == "tool":
            return Message(role="assistant", contents=["Booked."])
        calls = [book("Lisbon", n).contents[0] for n in range(3)]
        return Message(role="assistant", contents=calls)

    store, agent, _ = fenced(answer, booked)
    try:
        asyncio.run(agent.run("Book the flight for trip 42."))
        assert booked == ["Lisbon"] * 3
        decisions = audited(store, agent)
        assert [d.verdict for d in decisions] == ["allow"] * 3
        assert len({d.plan for d in decisions}) == 1  # one plan cited by all three
    finally:
        store.close()


def test_after_a_refusal_nothing_older_is_called_current() -> None:
    """The records read as the run started stay in its instructions: they are not labelled
    current, and the refusal shows the current value."""
    booked: list[str] = []
    moves = iter(["Porto"])

    def answer(messages: Sequence[Message], options: Mapping[str, Any]) -> Message:
        if messages[-1].role == "tool" and booked:
            return Message(role="assistant", contents=["Booked."])
        if len(messages) == 1:
            store.put(REQ, {"destination": next(moves)}, author="customer")  # while it thinks
            return book("Lisbon", 1)
        return book("Porto", 2)

    store, agent, client = fenced(answer, booked)
    try:
        response = asyncio.run(agent.run("Book the flight for trip 42."))
        assert booked == ["Porto"]
        refusal = text_of(results(response.messages)[0])
        assert '{"destination":"Porto"}' in refusal
        instructions = client.seen[1][1]  # what the model was shown after the refusal
        assert '{"destination":"Lisbon"}' in instructions  # as the run started...
        assert "current" not in instructions.lower()  # ...and not called current
    finally:
        store.close()


async def test_a_closed_store_blocks_as_store_unavailable(tmp_path: Path) -> None:
    store = await open_async_store(f"sqlite:///{tmp_path / 'team.db'}")
    await store.aclose()  # before the run
    booked: list[str] = []

    def book_flight(destination: str) -> str:
        """Book the trip's flight."""
        booked.append(destination)
        return "booked"

    client = Client(lambda messages, options: book("Lisbon"))
    policy = Policy().declare("book_flight", depends_on=[REQ])
    fence = PlanfenceFunctionMiddleware(store, policy, keys=[REQ], agent="booker")
    agent = Agent(client, tools=[book_flight], context_providers=[fence], middleware=[fence])
    response = await agent.run("Book the flight for trip 42.")
    assert booked == []
    [block] = results(response.messages)
    [item] = block.items or []
    payload = parse_payload(item.additional_properties["planfence"])
    assert (payload.verdict, payload.reason) == ("block", "store_unavailable")
    assert "cannot be read" in client.seen[0][1]
