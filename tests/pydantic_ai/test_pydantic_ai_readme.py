"""The README's PydanticAI snippet runs as written (with a `FunctionModel` that books and
answers), and the capability's refusals reach the model the framework's way."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
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

from planfence.adapters.pydantic_ai import Planfence
from planfence.plugins.gate import Policy, find_decisions_sync
from planfence.shared_memory import open_store

# `Agent.run_sync` leaves its event loop open as the thread's current loop.
pytestmark = pytest.mark.usefixtures("closes_run_sync_loop")

README = Path(__file__).resolve().parents[2] / "README.md"
REQ = "trip/42/requirements"


def snippets(heading: str) -> list[str]:
    text = README.read_text(encoding="utf-8")
    start = text.index(f"### {heading}\n")
    end = text.find("\n### ", start + 1)
    return re.findall(r"```python\n(.*?)```", text[start:end], re.S)


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


def test_pydantic_ai_readme_snippet_runs(capsys: Any) -> None:
    [code] = snippets("Add planfence to a PydanticAI agent")
    namespace: dict[str, Any] = {"__name__": "readme", "model": booking_model(["Lisbon"])}
    exec(compile(code, str(README), "exec"), namespace)
    try:
        assert capsys.readouterr().out.strip() == "Booked."
        store = namespace["store"]
        [allow] = find_decisions_sync(store, source="gate")
        assert (allow.verdict, allow.reason) == ("allow", "current")
        plan = store.get(allow.plan)
        assert plan.parents == (store.head(REQ),)  # the plan cites exactly what was shown
    finally:
        namespace["store"].close()


def test_a_stale_plan_is_a_model_retry_and_the_retry_books_the_new_value() -> None:
    store = open_store("memory://")
    store.own(REQ, "customer")
    store.put(REQ, {"destination": "Lisbon"}, author="customer")
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
        retried = [p for p in parts if isinstance(p, ToolReturnPart) and p.retry is not None]
        if any(isinstance(p, ToolReturnPart) for p in parts) and not retried:
            return ModelResponse(parts=[TextPart("Booked.")])
        if retried:
            return ModelResponse(parts=[ToolCallPart("book_flight", {"destination": "Porto"})])
        store.put(REQ, {"destination": "Porto"}, author="customer")  # while the model thinks
        return ModelResponse(parts=[ToolCallPart("book_flight", {"destination": "Lisbon"})])

    policy = Policy().declare("book_flight", depends_on=[REQ])
    fence = Planfence(store, policy, keys=[REQ], agent="booker")
    agent = Agent(FunctionModel(answer), tools=[book_flight], capabilities=[fence])
    try:
        assert agent.run_sync("Book the flight for trip 42.").output == "Booked."
        assert booked == ["Porto"]
        # The refusal reached the model as the framework's retry, naming the change.
        [retry] = [p for p in seen if isinstance(p, ToolReturnPart) and p.retry is not None]
        assert retry.retry.cause == "model_retry"
        assert f"{REQ} changed" in str(retry.content) and "Porto" in str(retry.content)
        fence.close()  # the deferred audit writes the allow it queued
        verdicts = sorted(d.verdict for d in find_decisions_sync(store, source="gate"))
        assert verdicts == ["allow", "replan"]
    finally:
        store.close()
