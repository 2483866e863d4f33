"""PlanFence across A2A: a skill call is a message naming the skill (`dev.planfence/skill` in its
metadata) with its arguments as a data part; the sender's plan id travels beside it
(`dev.planfence/plan`). Each skill declares `D(a)` in the policy like a tool.

- `PlanfenceAgentExecutor` wraps the receiving agent's `AgentExecutor`: before the agent acts, the
  gate checks the sender's plan against the shared store; the agent runs inside the allow (its
  fencing token is `planfence.fence.current()`); a refusal is the task's answer:
  `TASK_STATE_REJECTED` for a replan (the sender may plan again once), `TASK_STATE_FAILED` for a
  block, with the refusal in words and its `RefusalPayload` in the status message's metadata.
- `PlanfenceInterceptor` is the sender's client interceptor: on an outbound SendMessage for a
  skill with side effects it attaches the plan; given a gate, it checks the plan first and
  answers a refusal itself, the same task, without sending.
- `SenderPlans` is the sender's read side: the records to show its model, and the plan its next
  skill calls carry, citing exactly those records. A store it cannot reach is not an exception:
  its model is told the records cannot be read, and the interceptor answers the skill call
  itself with a `store_unavailable` refusal (a failed task), without sending.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from typing import Any

from planfence.plugins.gate import (
    DEFAULT_AUDIT,
    AuditMode,
    Gate,
    GateMiddleware,
    Judgement,
    Middleware,
    PlanStamper,
    Policy,
    Refused,
    ToolCall,
)
from planfence.plugins.gate.outage import PlanUnavailable
from planfence.shared_memory import AsyncStore, Record, Store, StoreBridge
from planfence.shared_memory.extras import extra_imports

from ..base import DEFAULT_HEADER, Adapter, read, reads_or_down, shown_text, stamp

with extra_imports("a2a", "planfence.adapters.a2a"):
    from a2a.client.interceptors import AfterArgs, BeforeArgs, ClientCallInterceptor
    from a2a.helpers import get_data_parts, new_data_part, new_message, new_text_part
    from a2a.server.agent_execution import AgentExecutor, RequestContext
    from a2a.server.events import EventQueue
    from a2a.types import (
        Message,
        Role,
        SendMessageResponse,
        StreamResponse,
        Task,
        TaskState,
        TaskStatus,
    )
    from google.protobuf import json_format

try:  # the check joins the sender's trace on the receiving host (W3C trace context)
    from opentelemetry import context as otel_context
    from opentelemetry import propagate
except ImportError:  # the otel extra is not installed
    propagate = None  # type: ignore[assignment]

PLAN = "dev.planfence/plan"
SKILL = "dev.planfence/skill"
REFUSAL = "dev.planfence/refusal"
TRACE = "dev.planfence/trace"
_SENDS = ("send_message", "send_message_streaming")


def skill_message(skill: str, args: Mapping[str, Any], *, plan: str | None = None) -> Message:
    """A user message calling `skill` with `args` (and, when given, the plan it acts under)."""
    message = new_message([new_data_part(dict(args))], role=Role.ROLE_USER)
    message.metadata.update({SKILL: skill, **({PLAN: plan} if plan else {})})
    return message


def skill_call(message: Message, default_skill: str | None = None) -> ToolCall | None:
    """The gate's view of a message: its skill, the arguments in its data part, its plan."""
    meta = json_format.MessageToDict(message.metadata)
    skill = meta.get(SKILL) or default_skill
    if not isinstance(skill, str):
        return None
    data = next((d for d in get_data_parts(message.parts) if isinstance(d, dict)), {})
    return ToolCall(skill, data, meta.get(PLAN))


def refusal_task(refused: Refused, task_id: str, context_id: str) -> Task:
    """The task a refused skill call ends as: rejected (replan) or failed (block)."""
    status = new_message([new_text_part(refused.message)], context_id, task_id)
    status.metadata.update({REFUSAL: refused.payload.wire()})
    state = TaskState.TASK_STATE_REJECTED if refused.replan else TaskState.TASK_STATE_FAILED
    return Task(id=task_id, context_id=context_id, status=TaskStatus(state=state, message=status))


class PlanfenceAgentExecutor(Adapter, AgentExecutor):
    """The receiving agent's executor behind the gate.

    Args:
        inner: the agent's own executor; it runs only on an allow.
        store: the shared store (an `AsyncStore` or a sync `Store`).
        policy: the declared scopes of the agent's skills.
        agent: who acts, for the audit log.
        skill: the skill a message that names none calls (a one-skill agent); else such a
            message is refused.
        gate: a `Gate` configured beyond these settings (as for `GateMiddleware`).
        middleware: gate middleware, outermost first.
        audit: how allows are recorded (`deferred` by default; as for `GateMiddleware`).
    """

    def __init__(
        self,
        inner: AgentExecutor,
        store: AsyncStore | Store,
        policy: Policy | Mapping[str, Any] | str,
        *,
        agent: str = "agent",
        skill: str | None = None,
        gate: Gate | None = None,
        middleware: Iterable[Middleware] = (),
        audit: AuditMode = DEFAULT_AUDIT,
    ) -> None:
        self.inner, self.skill = inner, skill
        self.attach_gate(store, policy, agent=agent, gate=gate, middleware=middleware, audit=audit)

    async def execute(self, context: RequestContext, event_queue: EventQueue) -> None:
        with _sender_trace(context.message):
            await self._execute(context, event_queue)

    async def _execute(self, context: RequestContext, event_queue: EventQueue) -> None:
        call = skill_call(context.message, self.skill) if context.message else None
        if call is None:
            refused = await self.gate.refuse(
                ToolCall("?", {}), "malformed_call", "the message names no skill", by="a2a"
            )
            return await self._answer(context, event_queue, refused)
        async with self.gate.guard(call) as judged:
            if judged.allowed:
                return await self.inner.execute(context, event_queue)
        await self._answer(context, event_queue, judged)

    async def _answer(self, context: RequestContext, queue: EventQueue, judged: Judgement) -> None:
        assert isinstance(judged, Refused)
        task_id, context_id = context.task_id or _id(), context.context_id or _id()
        await queue.enqueue_event(refusal_task(judged, task_id, context_id))

    async def cancel(self, context: RequestContext, event_queue: EventQueue) -> None:
        await self.inner.cancel(context, event_queue)


class SenderPlans:
    """The sending agent's records and plans: `show()` is the text its model is shown (the
    current records, or why they cannot be read); `stamp()`, called when the model decides to
    call skills, stamps the plan they carry, citing exactly what `show()` showed (each plan
    supersedes the one before). Give it to `PlanfenceInterceptor`, which attaches `last`.

    Args:
        store: an `AsyncStore`, a sync `Store`, a URL, or a `StoreBridge`.
        agent: who plans: plans are stored under `plans/<agent>`.
        keys: keys whose current version is shown.
        prefixes: key prefixes shown the same way.
        header: the first line of the records text.
    """

    def __init__(
        self,
        store: AsyncStore | Store | StoreBridge | str,
        agent: str,
        *,
        keys: Iterable[str] = (),
        prefixes: Iterable[str] = (),
        header: str = DEFAULT_HEADER,
    ) -> None:
        self.stamper = PlanStamper(store, agent)
        self.keys, self.prefixes, self.header = list(keys), list(prefixes), header
        self.shown: list[Record] | PlanUnavailable = []
        self.last: str | PlanUnavailable | None = None

    async def show(self) -> str:
        """The records as the model reads them now."""
        self.shown = await read(self.stamper, self.keys, self.prefixes)
        return shown_text(self.header, self.shown)

    async def stamp(self) -> str | PlanUnavailable:
        """The plan of the skill calls the model makes from what it was last shown."""
        self.last = await stamp(self.stamper, reads_or_down(self.shown))
        return self.last

    def reset(self) -> None:
        """A new request: its first plan starts a chain of its own."""
        self.stamper.reset()
        self.shown, self.last = [], None


class PlanfenceInterceptor(ClientCallInterceptor):
    """Carries the sender's plan on outbound SendMessage calls for skills with side effects.

    Args:
        plan: the plan to carry: `SenderPlans` or a `PlanStamper` (its latest plan), or a
            function returning the plan id (None: no plan). A plan that could not be stamped
            because the store was down is refused here, as `store_unavailable`.
        policy: the declared scopes; calls of a skill declared `ungated` carry no plan.
        gate: when given, the plan is checked before the message leaves, and a refusal is
            answered here (the receiving agent checks again before it acts).
    """

    def __init__(
        self,
        plan: SenderPlans | PlanStamper | Callable[[], str | None],
        policy: Policy | Mapping[str, Any] | str,
        *,
        gate: GateMiddleware | None = None,
    ) -> None:
        self.plan = plan
        self.policy, self.gate = Policy.coerce(policy), gate

    async def before(self, args: BeforeArgs) -> None:
        message = args.input.message if args.method in _SENDS else None
        call = skill_call(message) if message is not None else None
        declared = self.policy.get(call.tool) if call is not None else None
        if call is None or message is None or (declared is not None and declared.ungated):
            return
        plan = call.plan or self._latest()
        if isinstance(plan, PlanUnavailable) and declared is None:
            plan = None  # an undeclared skill: the receiver refuses it for that
        if isinstance(plan, PlanUnavailable):  # nothing to send a plan for: refused here
            refused = Refused(plan.verdict(call.tool, self.agent))
            args.early_return = _reply(args.method, refused, message)
            return
        carrier: dict[str, str] = {}
        if propagate is not None:
            propagate.inject(carrier)
        message.metadata.update(
            {**({PLAN: plan} if plan else {}), **({TRACE: carrier} if carrier else {})}
        )
        if self.gate is None:
            return
        judged = await self.gate.judge(ToolCall(call.tool, call.args, plan))
        await self.gate.release(judged)  # a lease is the receiver's to take, while it acts
        if isinstance(judged, Refused):
            args.early_return = _reply(args.method, judged, message)

    def _latest(self) -> str | PlanUnavailable | None:
        if isinstance(self.plan, SenderPlans | PlanStamper):
            return self.plan.last
        return self.plan()

    @property
    def agent(self) -> str | None:
        plans = self.plan.stamper if isinstance(self.plan, SenderPlans) else self.plan
        return plans.author if isinstance(plans, PlanStamper) else None

    async def after(self, args: AfterArgs) -> None:
        return None


def _reply(method: str, refused: Refused, message: Message) -> Any:
    """The answer to a send the sender refused itself: the refused task, as the server would."""
    task = refusal_task(refused, message.task_id or _id(), message.context_id or _id())
    reply = SendMessageResponse if method == "send_message" else StreamResponse
    return reply(task=task)


@contextmanager
def _sender_trace(message: Message | None) -> Iterator[None]:
    """Run inside the trace context the sender put in the message, when it put one."""
    meta = json_format.MessageToDict(message.metadata) if message is not None else {}
    carrier = meta.get(TRACE)
    if propagate is None or not isinstance(carrier, dict):
        yield
        return
    token = otel_context.attach(propagate.extract(carrier))
    try:
        yield
    finally:
        otel_context.detach(token)


def _id() -> str:
    return str(uuid.uuid4())


__all__ = [
    "PLAN",
    "REFUSAL",
    "SKILL",
    "TRACE",
    "PlanfenceAgentExecutor",
    "PlanfenceInterceptor",
    "SenderPlans",
    "refusal_task",
    "skill_call",
    "skill_message",
]
