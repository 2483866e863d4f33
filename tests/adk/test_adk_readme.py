"""The Google ADK page's snippet runs as written (on a scripted `BaseLlm`), and a refusal is
the tool's result: ADK skips the tool and the model reads the refusal payload."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncGenerator
from pathlib import Path
from typing import Any

from docpages import block
from google.adk.agents import LlmAgent
from google.adk.apps import App
from google.adk.models import BaseLlm
from google.adk.models.llm_request import LlmRequest
from google.adk.models.llm_response import LlmResponse
from google.adk.runners import InMemoryRunner
from google.genai import types
from pydantic import Field

from planfence.adapters.adk import PlanfencePlugin
from planfence.plugins.gate import Policy, find_decisions_sync
from planfence.shared_memory import open_async_store, open_store

PAGE = "docs/frameworks/adk.md"
REQ = "trip/42/requirements"
POLICY = Policy().declare("book_flight", depends_on=[REQ])


class Booking(BaseLlm):
    """Calls book_flight(destination) for each scripted destination until one ran."""

    destinations: list[str] = Field(default_factory=list)
    requests: list[LlmRequest] = Field(default_factory=list)
    revise: Any = None

    async def generate_content_async(
        self, llm_request: LlmRequest, stream: bool = False
    ) -> AsyncGenerator[LlmResponse, None]:
        self.requests.append(llm_request)
        last = llm_request.contents[-1].parts or []
        answers = [p.function_response.response for p in last if p.function_response]
        if (answers and "result" in answers[-1]) or not self.destinations:
            part = types.Part(text="Booked.")
        else:
            if self.revise is not None:
                self.revise()
                self.revise = None
            args = {"destination": self.destinations.pop(0)}
            part = types.Part(function_call=types.FunctionCall(name="book_flight", args=args))
        yield LlmResponse(content=types.Content(role="model", parts=[part]))


def test_adk_page_snippet_runs(tmp_path: Path) -> None:
    code = block(PAGE, "Add planfence to a Google ADK agent")
    # The snippet closes its store: on a file, what it wrote can be read back after.
    url = f"sqlite:///{tmp_path / 'team.db'}"
    code = code.replace('open_store("memory://")', f"open_store({url!r})")
    model = Booking(model="scripted", destinations=["Lisbon"])
    namespace: dict[str, Any] = {"__name__": "snippet", "model": model}
    exec(compile(code, PAGE, "exec"), namespace)
    store = open_store(url)
    try:
        [allow] = find_decisions_sync(store, source="gate")
        assert (allow.verdict, allow.reason) == ("allow", "current")
        assert store.get(allow.plan).parents == (store.head(REQ),)
        assert "Lisbon" in str(model.requests[0].config.system_instruction)  # the records shown
    finally:
        store.close()


def test_a_stale_plan_is_answered_by_the_refusal_and_the_replan_books() -> None:
    store = open_store("memory://")
    store.own(REQ, "customer")
    store.put(REQ, {"destination": "Lisbon"}, author="customer")
    booked: list[str] = []

    def book_flight(destination: str) -> str:
        """Book the trip's flight."""
        booked.append(destination)
        return f"booked a flight to {destination}"

    def revise() -> None:  # another agent commits while the model thinks
        store.put(REQ, {"destination": "Porto"}, author="customer")

    model = Booking(model="scripted", destinations=["Lisbon", "Porto"], revise=revise)
    fence = PlanfencePlugin(store, POLICY, keys=[REQ], agent="booker")
    agent = LlmAgent(name="booker", model=model, tools=[book_flight])
    runner = InMemoryRunner(app=App(name="trips", root_agent=agent, plugins=[fence]))
    try:
        asyncio.run(runner.run_debug("Book the flight.", quiet=True))
        asyncio.run(runner.close())  # the plugin's gate writes the allow it queued
        assert booked == ["Porto"]
        verdicts = [d.verdict for d in reversed(find_decisions_sync(store, source="gate"))]
        assert verdicts == ["replan", "allow"]
        # ADK skipped the tool and gave the model the refusal payload as its result.
        [refusal] = [
            p.function_response.response
            for r in model.requests
            for p in r.contents[-1].parts or []
            if p.function_response and "verdict" in (p.function_response.response or {})
        ]
        assert refusal["verdict"] == "replan" and refusal["stale"][0]["key"] == REQ
        # The refusal itself says what changed and the current value, not only the key.
        assert f"{REQ} changed" in refusal["message"]
        assert '{"destination":"Porto"}' in refusal["message"]
        assert "Porto" in str(model.requests[1].config.system_instruction)
    finally:
        store.close()


async def test_a_closed_store_blocks_as_store_unavailable(tmp_path: Path) -> None:
    store = await open_async_store(f"sqlite:///{tmp_path / 'team.db'}")
    await store.aclose()  # before the run
    booked: list[str] = []

    def book_flight(destination: str) -> str:
        """Book the trip's flight."""
        booked.append(destination)
        return f"booked a flight to {destination}"

    model = Booking(model="scripted", destinations=["Lisbon"])
    fence = PlanfencePlugin(store, POLICY, keys=[REQ], agent="booker")
    agent = LlmAgent(name="booker", model=model, tools=[book_flight])
    runner = InMemoryRunner(app=App(name="trips", root_agent=agent, plugins=[fence]))
    try:
        await runner.run_debug("Book the flight.", quiet=True)  # no plugin error
    finally:
        await runner.close()
    assert booked == []
    assert "cannot be read" in str(model.requests[0].config.system_instruction)
    [block] = [
        p.function_response.response
        for r in model.requests
        for p in r.contents[-1].parts or []
        if p.function_response
    ]
    assert (block["verdict"], block["reason"]) == ("block", "store_unavailable")
