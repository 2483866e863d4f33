"""Scripted models and a trip-booking team for the AutoGen adapter tests."""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any

from autogen_agentchat.conditions import MaxMessageTermination
from autogen_agentchat.teams import RoundRobinGroupChat
from autogen_core import FunctionCall
from autogen_core.models import CreateResult, ModelInfo, RequestUsage
from autogen_core.tools import FunctionTool, StaticWorkbench
from autogen_ext.models.replay import ReplayChatCompletionClient

from planfence.adapters.autogen import (
    FencedAgent,
    PlanfenceTermination,
    PlanfenceWorkbench,
    PlanningAgent,
    SharedMemory,
)
from planfence.demos.executors import on_baseline
from planfence.plugins.gate import Policy
from planfence.shared_memory import AsyncStore, Store

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


def tool_call(name: str, args: Mapping[str, Any], call_id: str = "call-1") -> CreateResult:
    return CreateResult(
        finish_reason="function_calls",
        content=[FunctionCall(id=call_id, name=name, arguments=json.dumps(args))],
        usage=RequestUsage(prompt_tokens=0, completion_tokens=0),
        cached=False,
    )


class ThinkingClient(ReplayChatCompletionClient):
    """A scripted model; `meanwhile[i]` runs before its i-th answer, as if another agent
    committed while this one was thinking."""

    def __init__(
        self,
        completions: Sequence[str | CreateResult],
        meanwhile: Mapping[int, Callable[[], Awaitable[None]]] | None = None,
    ) -> None:
        super().__init__(list(completions), model_info=MODEL_INFO)
        self.meanwhile = dict(meanwhile or {})
        self.answers = 0

    async def create(self, *args: Any, **kwargs: Any) -> CreateResult:
        hook = self.meanwhile.pop(self.answers, None)
        self.answers += 1
        if hook is not None:
            await hook()
        return await super().create(*args, **kwargs)


class Trip:
    """A customer who owns the requirements, a planner, and an executor that books flights."""

    def __init__(self, store: AsyncStore | Store) -> None:
        self.store = store
        self.booked: list[str] = []

    async def seed(self, destination: str = "Lisbon") -> str:
        return (await self._put(destination)).id

    async def _put(self, destination: str) -> Any:
        if isinstance(self.store, Store):
            sync = self.store
            if sync.owner(REQ) is None:
                sync.own(REQ, "customer")
            return sync.put(REQ, {"destination": destination}, author="customer")
        if await self.store.owner(REQ) is None:
            await self.store.own(REQ, "customer")
        return await self.store.put(REQ, {"destination": destination}, author="customer")

    def revise(self, destination: str) -> Callable[[], Awaitable[None]]:
        async def change() -> None:
            await self._put(destination)

        return change

    def team(
        self,
        *,
        plans: Sequence[str],
        calls: Sequence[str],
        revisions: Mapping[int, str],
        checker: Any = None,
    ) -> tuple[RoundRobinGroupChat, PlanningAgent, FencedAgent]:
        booked = self.booked

        def book_flight(destination: str) -> str:
            """Book the flight for the trip."""
            booked.append(destination)
            return f"booked a flight to {destination}"

        planner = PlanningAgent(
            "planner",
            ReplayChatCompletionClient(list(plans), model_info=MODEL_INFO),
            memory=[SharedMemory(self.store, keys=[REQ])],
            system_message="Plan the booking from the current requirements.",
        )
        client = ThinkingClient(
            [
                tool_call("book_flight", {"destination": d}, f"call-{i}")
                for i, d in enumerate(calls)
            ],
            {i: self.revise(d) for i, d in revisions.items()},
        )
        tools = PlanfenceWorkbench(
            StaticWorkbench([FunctionTool(book_flight, description="Book a flight.")]),
            store=self.store,
            policy=POLICY,
            agent="executor",
        )
        if checker is not None:  # the control: a baseline judges instead of the gate
            on_baseline(tools.gate, checker)
        executor = FencedAgent("executor", client, workbench=tools)
        team = RoundRobinGroupChat(
            [planner, executor],
            termination_condition=PlanfenceTermination() | MaxMessageTermination(12),
        )
        return team, planner, executor
