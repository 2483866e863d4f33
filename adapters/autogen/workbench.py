"""`PlanfenceWorkbench`: the PlanFence gate in front of any AutoGen workbench.

Every `call_tool` is checked against the plan of the turn it belongs to: a `FencedAgent` opens a
turn (`agent_turn`) acting under the plan id it found in its incoming messages, and every call
made during that turn, in whatever task AutoGen runs it, finds that turn. One workbench can so
serve several agents and teams at once without one's plan standing in for another's. Outside a
turn, calls act under the plan given to `bind` (for driving the workbench directly).

A refusal comes back as `ToolResult(is_error=True)` naming the records that changed, and the
wrapped tool does not run. An allowed tool runs with the allow's fencing token as
`planfence.fence.current()`, holding the lease its policy declares until it returns. Nothing
raises out of `call_tool`: an exception there leaves `AssistantAgent` waiting on a tool stream
that never ends.

AutoGen traces each tool run as an `execute_tool` span, which a `StaticWorkbench` opens inside
the tool's `run_json`. In front of one, the gate runs inside that span, so its
`planfence.check` span is the child of the tool's `execute_tool` span (and a refusal marks it as
an error): the fence calls twins of the workbench's tools whose `run` is checked first. In front
of any other workbench the gate runs before the call is handed over.
"""

from __future__ import annotations

import copy
from collections import deque
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager, suppress
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any, Literal

from planfence.plugins.gate import (
    DEFAULT_AUDIT,
    Allowed,
    AuditMode,
    Gate,
    Judgement,
    Middleware,
    Policy,
    Refused,
    ToolCall,
    Verdict,
)
from planfence.plugins.gate.audit_writer import audit_mode
from planfence.plugins.gate.decision import fail_closed
from planfence.plugins.gate.fence import bound
from planfence.plugins.gate.outage import PlanUnavailable
from planfence.shared_memory import AsyncStore, ConfigError, PlanfenceError, Store
from planfence.shared_memory.extras import extra_imports

with extra_imports("autogen", "planfence.adapters.autogen"):
    from autogen_core import CancellationToken, Component, ComponentModel
    from autogen_core.tools import (
        BaseTool,
        StaticWorkbench,
        TextResultContent,
        ToolResult,
        ToolSchema,
        Workbench,
    )
from pydantic import BaseModel
from typing_extensions import Self

from ..base import Adapter
from ._store import store_bridge


class ConcurrentTurnError(PlanfenceError):
    """One agent ran two turns at once; AutoGen agents hold one conversation, so what either
    turn planned from is unknown and its calls are refused."""


@dataclass(eq=False)
class Turn:
    """One agent turn: the plan its tool calls act under and the verdicts they got."""

    agent: str
    plan_id: str | PlanUnavailable | None
    fences: tuple[Any, ...] = ()
    verdicts: list[Verdict] = field(default_factory=list)
    overlapped: bool = False

    def covers(self, workbench: Any) -> bool:
        return any(f is workbench for f in self.fences)


_TURN: ContextVar[Turn | None] = ContextVar("planfence_autogen_turn", default=None)


@contextmanager
def agent_turn(turn: Turn) -> Iterator[Turn]:
    """Make `turn` the one that tool calls made inside the block (and in tasks it starts) act
    under."""
    token = _TURN.set(turn)
    try:
        yield turn
    finally:
        # A turn's stream closed from another task has lost its context along with the turn.
        with suppress(ValueError):
            _TURN.reset(token)


class Refusal(Exception):
    """A tool run stopped by the gate (inside the tool's span: the span records the error)."""


class _Pending:
    """One call through a fence, judged when its tool starts (inside AutoGen's span)."""

    def __init__(self, fence: PlanfenceWorkbench, call: ToolCall) -> None:
        self.fence = fence
        self.call = call
        self.judged: Judgement | None = None

    async def decide(self) -> None:
        if self.judged is None:
            self.judged = await self.fence.gate.judge(self.call)
        if isinstance(self.judged, Refused):
            raise Refusal(self.judged.message)

    async def run(self, original: Any, *args: Any, **kwargs: Any) -> Any:
        """Judge, then run the tool with the allow's fencing token; release its lease after."""
        await self.decide()
        fence = self.judged.fence if isinstance(self.judged, Allowed) else None
        try:
            with bound(fence):
                return await original(*args, **kwargs)
        finally:
            await self.fence.gate.release(self.judged)


_PENDING: ContextVar[_Pending | None] = ContextVar("planfence_autogen_pending", default=None)


def _checked_twin(tool: Any, fence: PlanfenceWorkbench) -> Any:
    """A shallow copy of `tool` that asks the gate before it runs. A `BaseTool` runs `run`
    inside the span its `run_json` opens, so the check goes there; a tool with its own
    `run_json` is checked as that starts. The original tool does the work (and keeps any state)."""
    twin = copy.copy(tool)
    inside = isinstance(tool, BaseTool) and type(tool).run_json is BaseTool.run_json
    attr = "run" if inside else "run_json"
    original = getattr(tool, attr)

    async def checked(*args: Any, **kwargs: Any) -> Any:
        pending = _PENDING.get()
        if pending is None or pending.fence is not fence:
            raise Refusal("a fenced tool ran outside its fence's call")  # never unchecked
        return await pending.run(original, *args, **kwargs)

    setattr(twin, attr, checked)
    return twin


def _checked_inside(workbench: Workbench, fence: PlanfenceWorkbench) -> StaticWorkbench | None:
    """A `StaticWorkbench` like `workbench` whose tools check first; None for any other kind
    (a subclass with its own `call_tool` included, or one whose tools cannot be reached), which
    is checked before the call instead."""
    if type(workbench).call_tool is not StaticWorkbench.call_tool:
        return None
    tools = getattr(workbench, "_tools", None)
    overrides = getattr(workbench, "_tool_overrides", None)
    if not isinstance(tools, list) or not isinstance(overrides, dict):
        return None
    return StaticWorkbench([_checked_twin(t, fence) for t in tools], tool_overrides=overrides)


class PlanfenceWorkbenchConfig(BaseModel):
    """Declarative form of `PlanfenceWorkbench`; the store travels as a URL, the policy as a
    dict."""

    workbench: ComponentModel
    store: str
    policy: dict[str, Any]
    agent: str | None = None
    audit: Literal["deferred", "durable", "off"] = DEFAULT_AUDIT


class PlanfenceWorkbench(Adapter, Workbench, Component[PlanfenceWorkbenchConfig]):
    """Runs the gate before each tool call of the wrapped workbench.

    Args:
        workbench: the workbench whose tools are guarded (static tools, an MCP workbench, ...).
        store: an `AsyncStore`, a sync `Store`, or a store URL.
        policy: the declared scopes (a `Policy`, its dict form, or TOML text).
        agent: the executor's id, written to the audit log.
        gate: a `Gate` configured beyond these settings (owner heads, `verify_heads`), over
            the same store and policy (see `GateMiddleware`); a workbench given one cannot be
            saved with `dump_component()` (a gate is not configuration).
        middleware: `planfence.plugins.gate.Middleware` around the gate, outermost first (not
            part of the component's configuration: give it again after `load_component`).
        audit: how the gate records decisions (`Gate`'s `audit`): `"deferred"` (default),
            allows written by group commit just after; `"durable"`, every decision before the
            tool runs; `"off"`. `stop()` writes what a deferred audit queued.

    `verdicts` keeps the latest `VERDICT_HISTORY` verdicts, for inspection; a turn's own
    verdicts travel with the turn, and every decision is in the store's audit log.
    """

    VERDICT_HISTORY = 256

    component_type = "workbench"
    component_config_schema = PlanfenceWorkbenchConfig
    component_provider_override = "planfence.adapters.autogen.PlanfenceWorkbench"

    def __init__(
        self,
        workbench: Workbench,
        *,
        store: AsyncStore | Store | str,
        policy: Policy | Mapping[str, Any] | str,
        agent: str | None = None,
        gate: Gate | None = None,
        middleware: Iterable[Middleware] = (),
        audit: AuditMode = DEFAULT_AUDIT,
    ) -> None:
        self.inner = workbench
        self.store = store_bridge(store)
        self.audit = audit_mode(audit)
        self.attach_gate(
            self.store, policy, agent=agent, gate=gate, middleware=middleware, audit=audit
        )
        self.policy = self.gate.policy
        self._given_gate = gate is not None
        self._plan_id: str | None = None
        self._tools: list[ToolSchema] | None = None
        self.verdicts: deque[Verdict] = deque(maxlen=self.VERDICT_HISTORY)
        self._inside = _checked_inside(workbench, self)

    # ---- the plan the calls act under

    @property
    def plan_id(self) -> str | None:
        """The plan calls outside any agent turn act under (see `bind`)."""
        return self._plan_id

    def bind(self, plan_id: str | None) -> None:
        """Act under `plan_id` for calls made outside a `FencedAgent`'s turn (None: such calls
        carry no plan and are blocked). A turn's own plan always comes first."""
        self._plan_id = plan_id

    def _turn(self) -> Turn | None:
        turn = _TURN.get()
        return turn if turn is not None and turn.covers(self) else None

    # ---- Workbench

    async def list_tools(self) -> list[ToolSchema]:
        # AssistantAgent lists the tools again before each call, where an exception would hang
        # it like one from call_tool: once listed, a failed listing falls back to the last one.
        try:
            self._tools = list(await self.inner.list_tools())
        except Exception:
            if self._tools is None:
                raise
        return list(self._tools)

    async def call_tool(
        self,
        name: str,
        arguments: Mapping[str, Any] | None = None,
        cancellation_token: CancellationToken | None = None,
        call_id: str | None = None,
    ) -> ToolResult:
        try:
            return await self._call(name, arguments, cancellation_token, call_id)
        except Exception as exc:  # never raise (see the module docstring)
            return _error(name, f"{type(exc).__name__}: {exc}")

    async def _call(
        self,
        name: str,
        arguments: Mapping[str, Any] | None,
        cancellation_token: CancellationToken | None,
        call_id: str | None,
    ) -> ToolResult:
        args = dict(arguments or {})
        turn = self._turn()
        plan_id = turn.plan_id if turn is not None else self._plan_id
        if turn is not None and turn.overlapped:
            error = ConcurrentTurnError(
                f"agent {turn.agent!r} ran turns concurrently; it plans from one conversation"
            )
            refused = Refused(fail_closed(name, plan_id, self.agent, error))
            self._keep(turn, refused)
            return _error(name, refused.message)
        # The gate sees a copy: the tool runs with exactly the arguments the model sent.
        call = ToolCall(name, copy.deepcopy(args), plan_id)
        if self._inside is None:
            async with self.gate.guard(call) as judged:
                self._keep(turn, judged)
                if isinstance(judged, Refused):
                    return _error(name, judged.message)
                return await self.inner.call_tool(name, args, cancellation_token, call_id)
        # Judged when the tool starts, inside the span AutoGen opens for it.
        pending = _Pending(self, call)
        token = _PENDING.set(pending)
        try:
            result = await self._inside.call_tool(name, args, cancellation_token, call_id)
        finally:
            _PENDING.reset(token)
        if pending.judged is None:
            # The tool never started (an unknown tool, arguments it rejects): judged all the
            # same, so the decision is audited and a refusal says why in the gate's words. An
            # allow of a call that never ran ends no action: the model may call again (the
            # framework's own retry), under the same plan and replan budget.
            pending.judged = await self.gate.judge(call)
            await self.gate.release(pending.judged)
            if not isinstance(pending.judged, Refused):
                self.verdicts.append(pending.judged.verdict)
                return result
        self._keep(turn, pending.judged)
        if isinstance(pending.judged, Refused):
            return _error(name, pending.judged.message)
        return result

    def _keep(self, turn: Turn | None, judged: Judgement) -> None:
        if turn is not None:
            turn.verdicts.append(judged.verdict)
        self.verdicts.append(judged.verdict)

    async def check(self, name: str, args: Mapping[str, Any]) -> Verdict:
        """The gate's verdict for a call now: under the current turn's plan, else the bound
        one; never raises."""
        turn = self._turn()
        plan_id = turn.plan_id if turn is not None else self._plan_id
        judged = await self.gate.judge(ToolCall(name, args, plan_id))
        await self.gate.release(judged)  # nothing runs under this judgement
        return judged.verdict

    async def start(self) -> None:
        await self.inner.start()

    async def flush(self) -> None:
        """Write the allows the gate's deferred audit has queued (before reading the journal)."""
        await self.gate.flush()

    async def stop(self) -> None:
        try:
            await self.inner.stop()
        finally:
            try:
                await self.gate.aclose()  # a deferred audit writes what it queued
            finally:
                await self.store.aclose()

    async def reset(self) -> None:
        await self.inner.reset()
        self._plan_id = None

    async def save_state(self) -> Mapping[str, Any]:
        return {"inner": dict(await self.inner.save_state()), "plan_id": self._plan_id}

    async def load_state(self, state: Mapping[str, Any]) -> None:
        await self.inner.load_state(state.get("inner", {}))
        self._plan_id = state.get("plan_id")

    def _to_config(self) -> PlanfenceWorkbenchConfig:
        if self._given_gate:
            raise ConfigError(
                "a workbench given gate= cannot be saved as a component: a gate is not "
                "configuration; save one built from its settings (store, policy, agent, audit)"
            )
        return PlanfenceWorkbenchConfig(
            workbench=self.inner.dump_component(),
            store=self.store.url,
            policy=self.policy.to_dict(),
            agent=self.agent,
            audit=self.audit,
        )

    @classmethod
    def _from_config(cls, config: PlanfenceWorkbenchConfig) -> Self:
        return cls(
            Workbench.load_component(config.workbench),
            store=config.store,
            policy=config.policy,
            agent=config.agent,
            audit=config.audit,
        )


def _error(name: str, text: str) -> ToolResult:
    return ToolResult(name=name, result=[TextResultContent(content=text)], is_error=True)
