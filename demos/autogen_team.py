"""An AutoGen team that books a trip behind the PlanFence gate.

    python -m planfence.demos.autogen_team [--stale-again] [--baseline] [--store URL]

The planner plans from the trip requirements; the customer then changes them; the executor,
holding the old plan, tries to book. The gate refuses, the planner replans once from the current
requirements, and the booking runs with the new destination. `--stale-again` makes the customer
change their mind twice (the second stale plan is blocked); `--baseline` runs the freshness-only
executor, which books the stale destination. The demo runs in a temporary store, removed when it
ends, unless `--store URL` names one to keep the records in.

Uses a real model when PLANFENCE_LLM_MODEL is set (PLANFENCE_LLM_BASE_URL, PLANFENCE_LLM_API_KEY;
any OpenAI-compatible endpoint, needs `pip install 'autogen-ext[openai]'`); scripted models
otherwise.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from autogen_agentchat.agents import BaseChatAgent
from autogen_agentchat.base import Response
from autogen_agentchat.conditions import MaxMessageTermination
from autogen_agentchat.messages import BaseChatMessage, TextMessage
from autogen_agentchat.teams import RoundRobinGroupChat
from autogen_core import CancellationToken, FunctionCall
from autogen_core.models import ChatCompletionClient, CreateResult, ModelInfo, RequestUsage
from autogen_core.tools import FunctionTool, StaticWorkbench
from autogen_ext.models.replay import ReplayChatCompletionClient

from planfence.adapters.autogen import (
    FencedAgent,
    PlanfenceTermination,
    PlanfenceWorkbench,
    PlanningAgent,
    SharedMemory,
    run_outcome,
)
from planfence.demos.executors import on_baseline
from planfence.plugins.gate import Policy
from planfence.shared_memory import AsyncStore, PlanfenceError, open_async_store

from .support import demo_store, team_demo_args, team_demo_parser

REQ = "trip/42/requirements"
POLICY = Policy().declare("book_flight", depends_on=[REQ])
MODEL_INFO = ModelInfo(
    vision=False,
    function_calling=True,
    json_output=False,
    family="unknown",
    structured_output=False,
    multiple_system_messages=True,
)


class Customer(BaseChatAgent):
    """Owns the trip requirements and changes them on the turns listed in `changes`."""

    def __init__(self, store: AsyncStore, changes: Sequence[str]) -> None:
        super().__init__("customer", "The traveller; owns the trip requirements.")
        self.store = store
        self.changes = list(changes)

    @property
    def produced_message_types(self) -> Sequence[type[BaseChatMessage]]:
        return (TextMessage,)

    async def on_messages(
        self, messages: Sequence[BaseChatMessage], cancellation_token: CancellationToken
    ) -> Response:
        if not self.changes:
            return Response(chat_message=TextMessage(content="No changes.", source=self.name))
        destination = self.changes.pop(0)
        await self.store.put(REQ, {"destination": destination}, author="customer")
        text = f"(customer updated {REQ}: destination {destination})"
        return Response(chat_message=TextMessage(content=text, source=self.name))

    async def on_reset(self, cancellation_token: CancellationToken) -> None:
        pass


def _call(destination: str, n: int) -> CreateResult:
    return CreateResult(
        finish_reason="function_calls",
        content=[
            FunctionCall(
                id=f"call-{n}",
                name="book_flight",
                arguments=json.dumps({"destination": destination}),
            )
        ],
        usage=RequestUsage(prompt_tokens=0, completion_tokens=0),
        cached=False,
    )


def real_client() -> ChatCompletionClient | None:
    """An OpenAI-compatible client from PLANFENCE_LLM_* variables, or None when unset."""
    model = os.environ.get("PLANFENCE_LLM_MODEL")
    if not model:
        return None
    try:
        from autogen_ext.models.openai import OpenAIChatCompletionClient
    except ImportError:
        sys.exit("PLANFENCE_LLM_MODEL is set: pip install 'autogen-ext[openai]' to use it")
    options: dict[str, Any] = {"model_info": MODEL_INFO}
    if base_url := os.environ.get("PLANFENCE_LLM_BASE_URL"):
        options["base_url"] = base_url
    api_key = os.environ.get("PLANFENCE_LLM_API_KEY") or "not-needed"
    return OpenAIChatCompletionClient(model=model, api_key=api_key, **options)


@dataclass
class DemoResult:
    booked: list[str] = field(default_factory=list)
    status: str = ""
    replans: int = 0
    stop_reason: str = ""
    lines: list[str] = field(default_factory=list)
    store: str = ""  # the line saying which store the demo used


async def run(
    *,
    stale_again: bool = False,
    baseline: bool = False,
    scripted: bool | None = None,
    store_url: str | None = None,
) -> DemoResult:
    """Play the story in `store_url` (default: a temporary store, removed afterwards)."""
    with demo_store(store_url) as where:
        store = await open_async_store(where.url)
        try:
            out = await _play(store, stale_again=stale_again, baseline=baseline, scripted=scripted)
        finally:
            await store.aclose()
    out.store = where.line()
    return out


async def _play(
    store: AsyncStore, *, stale_again: bool, baseline: bool, scripted: bool | None
) -> DemoResult:
    out = DemoResult()
    if await store.owner(REQ) is None:  # a kept store may hold the trip from an earlier run
        await store.own(REQ, "customer")
    await store.put(REQ, {"destination": "Lisbon"}, author="customer")
    changes = ["Porto", "Madrid"] if stale_again else ["Porto"]

    def book_flight(destination: str) -> str:
        """Book the trip's flight to `destination`."""
        out.booked.append(destination)
        return f"booked a flight to {destination}"

    client = None if scripted else real_client()
    planner_client = client or ReplayChatCompletionClient(
        ["Plan: book a flight to Lisbon.", "Plan: book a flight to Porto."], model_info=MODEL_INFO
    )
    executor_client = client or ReplayChatCompletionClient(
        [_call("Lisbon", 0), _call("Porto", 1)], model_info=MODEL_INFO
    )
    planner = PlanningAgent(
        "planner",
        planner_client,
        memory=[SharedMemory(store, keys=[REQ])],
        system_message="You plan trips. Say in one sentence which flight to book, from the "
        "current trip requirements only.",
    )
    tools = PlanfenceWorkbench(
        StaticWorkbench([FunctionTool(book_flight, description="Book the trip's flight.")]),
        store=store,
        policy=POLICY,
        agent="executor",
    )
    if baseline:  # the freshness-only control judges instead of the gate
        on_baseline(tools.gate)
    executor = FencedAgent(
        "executor",
        executor_client,
        workbench=tools,
        system_message="You execute the latest plan by calling book_flight exactly once.",
    )
    team = RoundRobinGroupChat(
        [planner, Customer(store, changes), executor],
        termination_condition=PlanfenceTermination() | MaxMessageTermination(16),
    )
    try:
        result = await team.run(task="Book the flight for trip 42.")
    finally:
        await tools.stop()  # closes the gate: its deferred audit writes the allows it queued
    for message in result.messages:
        if isinstance(message, BaseChatMessage):
            route = message.metadata.get("planfence.route")
            tag = f" [planfence: {route}]" if route else ""
            plan = message.metadata.get("planfence.plan")
            if plan and not route:
                tag = f" [plan {plan[:12]}]"
            out.lines.append(f"{message.source}: {message.to_text()}{tag}")
    outcome = run_outcome(result)
    out.status, out.replans = outcome.status, outcome.replans
    out.stop_reason = result.stop_reason or ""
    return out


def main(argv: Sequence[str] | None = None) -> int:
    parser = team_demo_parser(__doc__, baseline="freshness-only executor")
    args = team_demo_args(parser, argv)
    try:
        result = asyncio.run(
            run(
                stale_again=args.stale_again,
                baseline=args.baseline,
                scripted=args.scripted or None,
                store_url=args.store,
            )
        )
    except PlanfenceError as exc:
        print(f"{parser.prog}: error: {exc}", file=sys.stderr)
        return 1
    print(result.store)
    print("\n".join(result.lines))
    print(f"-- {result.stop_reason}")
    print(f"-- outcome: {result.status}, replans: {result.replans}, booked: {result.booked}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
