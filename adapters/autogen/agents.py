"""Agents that carry plans through an AutoGen team.

`PlanningAgent` stamps each answer as a plan record whose parents are the record ids its
`SharedMemory` injected that turn; the plan id travels in the message metadata. `FencedAgent`
binds the latest plan id it receives to its `FencedWorkbench`es and labels its answer with the
route the team should take: "replan" (back to the planner, once), "blocked" or "done".
"""

from __future__ import annotations

import json
from collections.abc import AsyncGenerator, Sequence
from typing import Any

from planfence.plugins.gate import BLOCK, REPLAN, Verdict, create_plan
from planfence.shared_memory import AsyncStore, ConfigError, MissingExtraError, Record

try:
    from autogen_agentchat.agents import AssistantAgent
    from autogen_agentchat.base import Response
    from autogen_agentchat.messages import BaseAgentEvent, BaseChatMessage
    from autogen_core import CancellationToken
except ImportError as exc:  # pragma: no cover - exercised in a subprocess test
    raise MissingExtraError("planfence.adapters.autogen", "autogen") from exc

from ._fence import (
    PARENTS,
    PLAN,
    REASON,
    ROUTE,
    ROUTE_BLOCKED,
    ROUTE_DONE,
    ROUTE_REPLAN,
    STALE,
    SUPERSEDES,
    TOOL,
    stale_json,
)
from .memory import SharedMemory
from .workbench import FencedWorkbench

StreamItem = BaseAgentEvent | BaseChatMessage | Response


def plan_of(messages: Sequence[BaseChatMessage]) -> str | None:
    """The newest plan id stamped on `messages`, if any."""
    for message in reversed(messages):
        plan = message.metadata.get(PLAN)
        if plan and message.metadata.get(ROUTE) is None:
            return plan
    return None


def refused_plan(messages: Sequence[BaseChatMessage]) -> str | None:
    """The plan an executor sent back for one replan, if `messages` hold such a refusal."""
    for message in reversed(messages):
        if message.metadata.get(ROUTE) == ROUTE_REPLAN:
            return message.metadata.get(PLAN)
    return None


def _with_metadata(response: Response, extra: dict[str, str]) -> Response:
    message = response.chat_message
    stamped = message.model_copy(update={"metadata": {**message.metadata, **extra}})
    return Response(chat_message=stamped, inner_messages=response.inner_messages)


class PlanningAgent(AssistantAgent):
    """An `AssistantAgent` whose answers are plans derived from the public records it was shown.

    It needs at least one `SharedMemory` in `memory=`; plans are stored in the first one's store
    under `plans/<name>`. After an executor's refusal the new plan supersedes the refused one,
    which is how the one-replan budget holds across agents and processes.
    """

    component_provider_override = "planfence.adapters.autogen.PlanningAgent"

    def __init__(self, name: str, model_client: Any, **kwargs: Any) -> None:
        super().__init__(name, model_client, **kwargs)
        self._shared = [m for m in self._memory or [] if isinstance(m, SharedMemory)]
        if not self._shared:
            raise ConfigError(f"PlanningAgent {name!r} needs a SharedMemory in memory=[...]")
        self.plans: list[Record] = []

    @property
    def read_set(self) -> tuple[str, ...]:
        """Record ids the agent was shown this turn, across its shared memories."""
        return tuple(dict.fromkeys(i for m in self._shared for i in m.last_read))

    async def on_messages_stream(
        self, messages: Sequence[BaseChatMessage], cancellation_token: CancellationToken
    ) -> AsyncGenerator[StreamItem, None]:
        supersedes = refused_plan(messages)
        async for item in super().on_messages_stream(messages, cancellation_token):
            if isinstance(item, Response):
                item = await self._stamp(item, supersedes)
            yield item

    async def _stamp(self, response: Response, supersedes: str | None) -> Response:
        parents = list(self.read_set)
        value = {"agent": self.name, "text": response.chat_message.to_text()}
        author = self.name

        async def store_plan(store: AsyncStore) -> Record:
            return await create_plan(
                store, author=author, parents=parents, value=value, supersedes=supersedes
            )

        plan = await self._shared[0].store.run(store_plan)
        self.plans.append(plan)
        extra = {PLAN: plan.id, PARENTS: json.dumps(parents)}
        if supersedes:
            extra[SUPERSEDES] = supersedes
        return _with_metadata(response, extra)


class FencedAgent(AssistantAgent):
    """An `AssistantAgent` executor whose tools run behind `FencedWorkbench`es.

    Before each turn it binds the newest plan id found in the incoming messages; after the turn
    it labels its answer with `planfence.route`: "replan", "blocked" or "done".
    """

    component_provider_override = "planfence.adapters.autogen.FencedAgent"

    def __init__(self, name: str, model_client: Any, **kwargs: Any) -> None:
        super().__init__(name, model_client, **kwargs)
        self._fences = [wb for wb in self._workbench if isinstance(wb, FencedWorkbench)]
        if not self._fences:
            raise ConfigError(f"FencedAgent {name!r} needs a FencedWorkbench in workbench=")

    @property
    def fences(self) -> tuple[FencedWorkbench, ...]:
        return tuple(self._fences)

    async def on_messages_stream(
        self, messages: Sequence[BaseChatMessage], cancellation_token: CancellationToken
    ) -> AsyncGenerator[StreamItem, None]:
        plan = plan_of(messages)
        for fence in self._fences:
            if plan is not None:
                fence.bind(plan)
            fence.begin_turn()
        async for item in super().on_messages_stream(messages, cancellation_token):
            if isinstance(item, Response):
                item = self._label(item)
            yield item

    def _label(self, response: Response) -> Response:
        verdicts = [v for f in self._fences for v in f.turn_verdicts]
        if not verdicts:
            return response
        refused = [v for v in verdicts if v.verdict == BLOCK] or [
            v for v in verdicts if v.verdict == REPLAN
        ]
        last: Verdict = refused[0] if refused else verdicts[-1]
        route = ROUTE_DONE
        if refused:
            route = ROUTE_BLOCKED if last.verdict == BLOCK else ROUTE_REPLAN
        extra = {ROUTE: route, TOOL: last.tool, REASON: last.reason, STALE: stale_json(last)}
        if last.plan:
            extra[PLAN] = last.plan
        return _with_metadata(response, extra)
