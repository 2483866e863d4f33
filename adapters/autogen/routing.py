"""Routing a refusal back to the planner in AutoGen teams, and reading how a run ended.

- `RoundRobinGroupChat([planner, executor], termination_condition=PlanfenceTermination())`:
  turns alternate, so a refusal reaches the planner next; the run stops when the executor's
  tools ran ("done") or the gate blocked ("blocked").
- `GraphFlow`: `add_replan_route(builder, planner, executor)` adds the back edge taken only on
  "replan"; give the executor's forward edges `condition=proceeds`.
- `SelectorGroupChat`: `selector_func=replan_selector("planner", "executor")`.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from planfence.shared_memory.extras import extra_imports

with extra_imports("autogen", "planfence.adapters.autogen"):
    from autogen_agentchat.base import TaskResult, TerminatedException, TerminationCondition
    from autogen_agentchat.messages import BaseAgentEvent, BaseChatMessage, StopMessage
    from autogen_agentchat.teams import DiGraphBuilder
    from autogen_core import Component
from pydantic import BaseModel, Field
from typing_extensions import Self

from ._metadata import PLAN, REASON, ROUTE, ROUTE_BLOCKED, ROUTE_DONE, ROUTE_REPLAN, STALE, TOOL


def route_of(message: BaseChatMessage | BaseAgentEvent) -> str | None:
    metadata = getattr(message, "metadata", None) or {}
    route = metadata.get(ROUTE)
    return route if isinstance(route, str) else None


def is_replan(message: BaseChatMessage) -> bool:
    """GraphFlow condition: the executor was refused and the planner gets its one replan."""
    return route_of(message) == ROUTE_REPLAN


def is_blocked(message: BaseChatMessage) -> bool:
    return route_of(message) == ROUTE_BLOCKED


def proceeds(message: BaseChatMessage) -> bool:
    """GraphFlow condition for the executor's forward edges: neither refused nor blocked."""
    return route_of(message) not in (ROUTE_REPLAN, ROUTE_BLOCKED)


def add_replan_route(builder: DiGraphBuilder, planner: Any, executor: Any) -> DiGraphBuilder:
    """Add the executor -> planner edge taken on a refusal, and start the graph at the planner.

    The graph still needs a leaf (for example a reporter after `proceeds`) and, being cyclic, a
    termination condition or `max_turns`.
    """
    builder.add_edge(executor, planner, condition=is_replan, activation_condition="any")
    builder.set_entry_point(planner)
    return builder


def replan_selector(
    planner: str, executor: str
) -> Callable[[Sequence[BaseAgentEvent | BaseChatMessage]], str | None]:
    """A `SelectorGroupChat` selector: planner -> executor, and back to the planner on refusal."""

    def select(thread: Sequence[BaseAgentEvent | BaseChatMessage]) -> str | None:
        chat = [m for m in thread if isinstance(m, BaseChatMessage)]
        if not chat:
            return planner
        last = chat[-1]
        if last.source == planner:
            return executor
        if last.source == executor and is_replan(last):
            return planner
        return None

    return select


class PlanfenceTerminationConfig(BaseModel):
    stop_on: list[str] = Field(default_factory=lambda: [ROUTE_DONE, ROUTE_BLOCKED])


class PlanfenceTermination(TerminationCondition, Component[PlanfenceTerminationConfig]):
    """Stops the team once the executor's tools ran ("done") or the gate blocked ("blocked").

    The stop message says what happened, e.g. "planfence blocked book_flight
    (stale_after_replan)".
    """

    component_config_schema = PlanfenceTerminationConfig
    component_provider_override = "planfence.adapters.autogen.PlanfenceTermination"

    def __init__(self, stop_on: Iterable[str] = (ROUTE_DONE, ROUTE_BLOCKED)) -> None:
        self.stop_on = list(stop_on)
        self._terminated = False

    @property
    def terminated(self) -> bool:
        return self._terminated

    async def __call__(
        self, messages: Sequence[BaseAgentEvent | BaseChatMessage]
    ) -> StopMessage | None:
        if self._terminated:
            raise TerminatedException("Termination condition has already been reached")
        for message in messages:
            route = route_of(message)
            if isinstance(message, BaseChatMessage) and route in self.stop_on:
                self._terminated = True
                meta = message.metadata
                if route == ROUTE_BLOCKED:
                    text = f"planfence blocked {meta.get(TOOL)} ({meta.get(REASON)})"
                else:
                    text = f"planfence: {meta.get(TOOL)} ran ({meta.get(REASON)})"
                return StopMessage(content=text, source="PlanfenceTermination")
        return None

    async def reset(self) -> None:
        self._terminated = False

    def _to_config(self) -> PlanfenceTerminationConfig:
        return PlanfenceTerminationConfig(stop_on=self.stop_on)

    @classmethod
    def _from_config(cls, config: PlanfenceTerminationConfig) -> Self:
        return cls(config.stop_on)


@dataclass(frozen=True)
class RunOutcome:
    """How a fenced run ended, read from the messages' planfence metadata."""

    status: str  # "done", "blocked", "replan" (refused, no new plan yet) or "none"
    plans: tuple[str, ...] = ()
    replans: int = 0
    tool: str | None = None
    reason: str | None = None
    stale_keys: tuple[str, ...] = ()
    routes: tuple[str, ...] = field(default_factory=tuple)

    @property
    def blocked(self) -> bool:
        return self.status == ROUTE_BLOCKED


def run_outcome(result: TaskResult | Sequence[BaseAgentEvent | BaseChatMessage]) -> RunOutcome:
    """Summarise a team run: plans stamped, replans, and the last executor route."""
    messages = result.messages if isinstance(result, TaskResult) else result
    plans: list[str] = []
    routes: list[str] = []
    last: dict[str, str] = {}
    for message in messages:
        if not isinstance(message, BaseChatMessage):
            continue
        route = route_of(message)
        if route is None:
            plan = message.metadata.get(PLAN)
            if plan:
                plans.append(plan)
        else:
            routes.append(route)
            last = dict(message.metadata)
    if not routes:
        return RunOutcome("none", tuple(plans))
    stale = tuple(s["key"] for s in json.loads(last.get(STALE) or "[]"))
    return RunOutcome(
        routes[-1],
        tuple(plans),
        routes.count(ROUTE_REPLAN),
        last.get(TOOL),
        last.get(REASON),
        stale,
        tuple(routes),
    )
