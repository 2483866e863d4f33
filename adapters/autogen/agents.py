"""Agents that carry plans through an AutoGen team.

`PlanningAgent` stamps each answer as a plan record whose parents are the record ids its
`SharedMemory` showed on that very turn (read from the turn's own memory events; the memory
replaces the records it showed on earlier turns, so the model sees no other versions of them);
the plan id travels in the message metadata. Each plan supersedes the agent's previous plan,
refused or not, until the agent is reset: the gate follows that chain back through plans that
made no gated call, so a step of ungated calls (a weather lookup) between a refusal and the
next plan does not renew the one replan. A new request (a message from the user, as
`team.run(task=...)` sends it) starts a new chain: its first plan supersedes nothing, so a
second run gets its own replan whatever happened to the first. When the records could not be
read, or the plan could not be stored (the store was down), the answer carries no plan but says
why (`planfence.unavailable`), and the executor's gated calls are refused as `store_unavailable`.

`FencedAgent` acts under the latest plan id it received: each of its turns carries that plan to
its `PlanfenceWorkbench`es, and its answer is labelled with the route the team should take:
"replan" (back to the planner, once), "blocked" or "done".

Nothing a turn read or acts under is kept in a memory or workbench, which teams may share. An
agent holds one conversation; if one agent object is nevertheless run in two turns at once (for
example by two teams), what it planned from is unknown, and the overlapping turns fail closed.
"""

from __future__ import annotations

import json
from collections import deque
from collections.abc import AsyncGenerator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from planfence.plugins.gate import PlanStamper, Verdict, fold_step
from planfence.plugins.gate.outage import PlanUnavailable, store_down
from planfence.plugins.gate.wire import payload_of
from planfence.shared_memory import ConfigError, Record
from planfence.shared_memory.extras import extra_imports

with extra_imports("autogen", "planfence.adapters.autogen"):
    from autogen_agentchat.agents import AssistantAgent
    from autogen_agentchat.base import Response
    from autogen_agentchat.messages import BaseAgentEvent, BaseChatMessage, MemoryQueryEvent
    from autogen_core import CancellationToken

from ._metadata import (
    PARENTS,
    PLAN,
    REASON,
    ROUTE,
    ROUTE_REPLAN,
    STALE,
    SUPERSEDES,
    TOOL,
    UNAVAILABLE,
)
from .memory import SharedMemory, record_ids, unavailable_of
from .workbench import PlanfenceWorkbench, Turn, agent_turn

StreamItem = BaseAgentEvent | BaseChatMessage | Response
USER = "user"
"""The source of a task message (`team.run(task=...)`): a new request."""


def plan_of(messages: Sequence[BaseChatMessage]) -> str | PlanUnavailable | None:
    """The newest plan id stamped on `messages` (or why the newest plan could not be), if any."""
    for message in reversed(messages):
        if message.metadata.get(ROUTE) is not None:
            continue
        down = message.metadata.get(UNAVAILABLE)
        if down:
            return PlanUnavailable(down)
        plan = message.metadata.get(PLAN)
        if plan:
            return plan
    return None


def new_request(messages: Sequence[BaseChatMessage]) -> bool:
    """Whether `messages` bring a new request: a message from the user."""
    return any(m.source == USER for m in messages)


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


@dataclass(eq=False)
class _PlanTurn:
    reads: list[str] = field(default_factory=list)
    overlapped: bool = False
    down: PlanUnavailable | None = None


class PlanningAgent(AssistantAgent):
    """An `AssistantAgent` whose answers are plans derived from the public records it was shown.

    It needs at least one `SharedMemory` in `memory=`; plans are stored in the first one's store
    under `plans/<name>`. Every new plan supersedes the previous one (after an executor's
    refusal, the refused one), which is how the one-replan budget holds across agents and
    processes. `plans` keeps the latest `PLAN_HISTORY` plans stamped, for inspection.
    """

    PLAN_HISTORY = 256

    component_provider_override = "planfence.adapters.autogen.PlanningAgent"

    def __init__(self, name: str, model_client: Any, **kwargs: Any) -> None:
        super().__init__(name, model_client, **kwargs)
        self._shared = [m for m in self._memory or [] if isinstance(m, SharedMemory)]
        if not self._shared:
            raise ConfigError(f"PlanningAgent {name!r} needs a SharedMemory in memory=[...]")
        self.plans: deque[Record] = deque(maxlen=self.PLAN_HISTORY)
        self._read_set: tuple[str, ...] = ()
        self.stamper = PlanStamper(self._shared[0].store, name)
        self._turns: set[_PlanTurn] = set()

    @property
    def read_set(self) -> tuple[str, ...]:
        """Record ids the agent's latest stamped plan cites."""
        return self._read_set

    async def on_messages_stream(
        self, messages: Sequence[BaseChatMessage], cancellation_token: CancellationToken
    ) -> AsyncGenerator[StreamItem, None]:
        if new_request(messages):
            self.stamper.reset()  # a new request: a chain (and a replan) of its own
        supersedes = refused_plan(messages) or self.stamper.last
        turn = _PlanTurn()
        _overlap(self._turns, turn)
        try:
            async for item in super().on_messages_stream(messages, cancellation_token):
                if isinstance(item, MemoryQueryEvent) and item.source == self.name:
                    turn.reads.extend(record_ids(item.content))
                    turn.down = turn.down or unavailable_of(item.content)
                if isinstance(item, Response):
                    item = await self._stamp(item, supersedes, turn)
                    # The turn ends with its response: `on_messages` returns at this point and
                    # leaves the stream suspended, so the `finally` below may run much later.
                    self._turns.discard(turn)
                yield item
        finally:
            self._turns.discard(turn)

    async def _stamp(self, response: Response, supersedes: str | None, turn: _PlanTurn) -> Response:
        # Overlapping turns share one model context: the plan cites nothing, so the gate blocks
        # every call whose declared scope it would have to vouch for.
        parents = [] if turn.overlapped else list(dict.fromkeys(turn.reads))
        value: dict[str, Any] = {"agent": self.name, "text": response.chat_message.to_text()}
        if turn.overlapped:
            value["unknown_reads"] = "the agent ran turns concurrently"
        down, plan = turn.down, None
        if down is None:
            try:
                plan = await self.stamper.stamp(parents, value=value, supersedes=supersedes)
            except Exception as exc:
                if not store_down(exc):
                    raise
                down = PlanUnavailable.of(exc)
        if plan is None:  # the records could not be read, or the plan not stored
            assert down is not None
            return _with_metadata(response, {UNAVAILABLE: down.error})
        self.plans.append(plan)
        self._read_set = tuple(parents)
        extra = {PLAN: plan.id, PARENTS: json.dumps(parents)}
        if supersedes:
            extra[SUPERSEDES] = supersedes
        return _with_metadata(response, extra)

    @property
    def last_plan(self) -> str | None:
        """The plan the agent's next plan supersedes (None after a reset)."""
        return self.stamper.last

    async def on_reset(self, cancellation_token: CancellationToken) -> None:
        await super().on_reset(cancellation_token)
        self.stamper.reset()
        self._read_set = ()
        self.plans.clear()

    async def save_state(self) -> Mapping[str, Any]:
        return {**await super().save_state(), "planfence_last_plan": self.stamper.last}

    async def load_state(self, state: Mapping[str, Any]) -> None:
        await super().load_state(state)
        plan = state.get("planfence_last_plan")
        self.stamper.last = plan if isinstance(plan, str) else None


class FencedAgent(AssistantAgent):
    """An `AssistantAgent` executor whose tools run behind `PlanfenceWorkbench`es.

    It acts under the newest plan id found in the messages it has received; each turn carries
    that plan to its workbenches' calls, and its answer is labelled with `planfence.route`:
    "replan", "blocked" or "done".
    """

    component_provider_override = "planfence.adapters.autogen.FencedAgent"

    def __init__(self, name: str, model_client: Any, **kwargs: Any) -> None:
        super().__init__(name, model_client, **kwargs)
        self._fences = [wb for wb in self._workbench if isinstance(wb, PlanfenceWorkbench)]
        if not self._fences:
            raise ConfigError(f"FencedAgent {name!r} needs a PlanfenceWorkbench in workbench=")
        self._plan: str | PlanUnavailable | None = None
        self._turns: set[Turn] = set()

    @property
    def fences(self) -> tuple[PlanfenceWorkbench, ...]:
        return tuple(self._fences)

    @property
    def plan_id(self) -> str | PlanUnavailable | None:
        """The plan this agent acts under: the newest one it has received."""
        return self._plan

    async def on_messages_stream(
        self, messages: Sequence[BaseChatMessage], cancellation_token: CancellationToken
    ) -> AsyncGenerator[StreamItem, None]:
        self._plan = plan_of(messages) or self._plan
        turn = Turn(self.name, self._plan, tuple(self._fences))
        _overlap(self._turns, turn)
        try:
            with agent_turn(turn):
                async for item in super().on_messages_stream(messages, cancellation_token):
                    if isinstance(item, Response):
                        item = _label(item, turn.verdicts)
                        self._turns.discard(turn)  # the turn ends with its response
                    yield item
        finally:
            self._turns.discard(turn)

    async def on_reset(self, cancellation_token: CancellationToken) -> None:
        await super().on_reset(cancellation_token)
        self._plan = None

    async def save_state(self) -> Mapping[str, Any]:
        plan = self._plan if isinstance(self._plan, str) else None
        return {**await super().save_state(), "planfence_plan": plan}

    async def load_state(self, state: Mapping[str, Any]) -> None:
        await super().load_state(state)
        plan = state.get("planfence_plan")
        self._plan = plan if isinstance(plan, str) else None


def _overlap(active: set[Any], turn: _PlanTurn | Turn) -> None:
    """Register `turn`; if another turn of the same agent is running, mark them all."""
    if active:
        turn.overlapped = True
        for other in active:
            other.overlapped = True
    active.add(turn)


def _label(response: Response, verdicts: Sequence[Verdict]) -> Response:
    """The turn's verdicts folded into one route (blocked beats replan beats done), on the
    response's metadata."""
    outcome = fold_step(payload_of(v) for v in verdicts)
    if outcome is None:
        return response
    stale = [{"key": k, "current": c} for k, c in outcome.current.items()]
    extra = {
        ROUTE: outcome.status,
        TOOL: outcome.tool,
        REASON: outcome.reason,
        STALE: json.dumps(stale, sort_keys=True),
    }
    if outcome.plan:
        extra[PLAN] = outcome.plan
    return _with_metadata(response, extra)
