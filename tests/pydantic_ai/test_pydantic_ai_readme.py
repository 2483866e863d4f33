"""The PydanticAI page's snippet runs as written (with a `FunctionModel` that books and
answers), and the capability's refusals reach the model the framework's way."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from docpages import block
from pydantic_ai import Agent
from pydantic_ai.messages import (
    ModelMessage,
    ModelRequest,
    ModelResponse,
    TextPart,
    ToolCallPart,
    ToolReturnPart,
)
from pydantic_ai.models.function import AgentInfo, FunctionModel

from planfence.adapters.pydantic_ai import PlanfenceCapability
from planfence.plugins.gate import Policy, find_decisions_sync
from planfence.shared_memory import open_async_store, open_store

# `Agent.run_sync` leaves its event loop open as the thread's current loop.
pytestmark = pytest.mark.usefixtures("closes_run_sync_loop")

PAGE = "docs/frameworks/pydantic-ai.md"
REQ = "trip/42/requirements"


def booking_model(destinations: list[str]) -> FunctionModel:
    """Books each destination in turn while the last answer was not a booking, then answers."""

    def answer(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        last = messages[-1]
        parts = last.parts if isinstance(last, ModelRequest) else []
        if any(isinstance(p, ToolReturnPart) for p in parts) or not destinations:
            return ModelResponse(parts=[TextPart("Booked.")])
        args = {"destination": destinations.pop(0)}
        return ModelResponse(parts=[ToolCallPart("book_flight", args)])

    return FunctionModel(answer)


def test_pydantic_ai_page_snippet_runs(capsys: Any, tmp_path: Path) -> None:
    code = block(PAGE, "Add planfence to a PydanticAI agent")
    # The snippet closes its store: on a file, what it wrote can be read back after.
    url = f"sqlite:///{tmp_path / 'team.db'}"
    code = code.replace('open_store("memory://")', f"open_store({url!r})")
    namespace: dict[str, Any] = {"__name__": "snippet", "model": booking_model(["Lisbon"])}
    exec(compile(code, PAGE, "exec"), namespace)
    assert capsys.readouterr().out.strip() == "Booked."
    store = open_store(url)
    try:
        [allow] = find_decisions_sync(store, source="gate")
        assert (allow.verdict, allow.reason) == ("allow", "current")
        plan = store.get(allow.plan)
        assert plan.parents == (store.head(REQ),)  # the plan cites exactly what was shown
    finally:
        store.close()


def trip_store() -> Any:
    store = open_store("memory://")
    store.own(REQ, "customer")
    store.put(REQ, {"destination": "Lisbon"}, author="customer")
    return store


POLICY = Policy().declare("book_flight", depends_on=[REQ])


def test_a_stale_plan_reaches_the_model_as_a_failed_tool_return_and_the_retry_books() -> None:
    store = trip_store()
    booked: list[str] = []
    seen: list[Any] = []

    def book_flight(destination: str) -> str:
        """Book the trip's flight."""
        booked.append(destination)
        return f"booked a flight to {destination}"

    def answer(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        last = messages[-1]
        parts = list(last.parts) if isinstance(last, ModelRequest) else []
        seen.extend(parts)
        returned = [p for p in parts if isinstance(p, ToolReturnPart)]
        if any(p.outcome == "failed" for p in returned):
            return ModelResponse(parts=[ToolCallPart("book_flight", {"destination": "Porto"})])
        if returned:
            return ModelResponse(parts=[TextPart("Booked.")])
        store.put(REQ, {"destination": "Porto"}, author="customer")  # while the model thinks
        return ModelResponse(parts=[ToolCallPart("book_flight", {"destination": "Lisbon"})])

    fence = PlanfenceCapability(store, POLICY, keys=[REQ], agent="booker")
    agent = Agent(FunctionModel(answer), tools=[book_flight], capabilities=[fence])
    try:
        assert agent.run_sync("Book the flight for trip 42.").output == "Booked."
        assert booked == ["Porto"]
        # What the model read: a failed tool return (not a retry), the refusal naming the change
        # and the current value.
        [refused] = [p for p in seen if isinstance(p, ToolReturnPart) and p.outcome != "success"]
        assert (refused.outcome, refused.retry) == ("failed", None)
        content = str(refused.content)
        assert f"{REQ} changed" in content and '{"destination":"Porto"}' in content
        fence.close()  # the deferred audit writes the allow it queued
        verdicts = sorted(d.verdict for d in find_decisions_sync(store, source="gate"))
        assert verdicts == ["allow", "replan"]
    finally:
        store.close()


def test_a_malformed_call_first_does_not_use_up_the_replan() -> None:
    """The tool's retry budget (1) goes to the malformed call; the replan is planfence's."""
    store = trip_store()
    booked: list[str] = []
    calls = iter([{"to": "Lisbon"}, {"destination": "Lisbon"}, {"destination": "Porto"}])

    def book_flight(destination: str) -> str:
        """Book the trip's flight."""
        booked.append(destination)
        return f"booked a flight to {destination}"

    def answer(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        last = messages[-1]
        parts = list(last.parts) if isinstance(last, ModelRequest) else []
        if any(isinstance(p, ToolReturnPart) and p.outcome == "success" for p in parts):
            return ModelResponse(parts=[TextPart("Booked.")])
        args = next(calls)
        if args == {"destination": "Lisbon"}:
            store.put(REQ, {"destination": "Porto"}, author="customer")  # while it thinks
        return ModelResponse(parts=[ToolCallPart("book_flight", args)])

    fence = PlanfenceCapability(store, POLICY, keys=[REQ], agent="booker")
    agent = Agent(FunctionModel(answer), tools=[book_flight], capabilities=[fence])
    try:
        assert agent.run_sync("Book the flight for trip 42.").output == "Booked."
        assert booked == ["Porto"]
        fence.close()
        verdicts = sorted(d.verdict for d in find_decisions_sync(store, source="gate"))
        assert verdicts == ["allow", "replan"]
    finally:
        store.close()


async def test_a_closed_store_is_a_store_unavailable_block_not_an_exception(
    tmp_path: Path,
) -> None:
    store = await open_async_store(f"sqlite:///{tmp_path / 'team.db'}")
    await store.aclose()  # before the run
    booked: list[str] = []
    instructions: list[str] = []
    returned: list[ToolReturnPart] = []

    def book_flight(destination: str) -> str:
        """Book the trip's flight."""
        booked.append(destination)
        return f"booked a flight to {destination}"

    def answer(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
        instructions.append(info.instructions or "")
        last = messages[-1]
        parts = list(last.parts) if isinstance(last, ModelRequest) else []
        returned.extend(p for p in parts if isinstance(p, ToolReturnPart))
        if returned:
            return ModelResponse(parts=[TextPart("Not booked.")])
        return ModelResponse(parts=[ToolCallPart("book_flight", {"destination": "Lisbon"})])

    fence = PlanfenceCapability(store, POLICY, keys=[REQ], agent="booker")
    agent = Agent(FunctionModel(answer), tools=[book_flight], capabilities=[fence])
    assert (await agent.run("Book the flight for trip 42.")).output == "Not booked."
    assert booked == []
    assert "cannot be read" in instructions[0]
    [block] = returned
    assert block.content["reason"] == "store_unavailable"
    assert block.content["verdict"] == "block"
