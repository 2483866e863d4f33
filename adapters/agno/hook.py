"""`PlanfenceToolHook`: PlanFence as an Agno tool hook, with the records in the agent's
instructions.

Read side: `fence.instructions(text)` is the agent's `instructions`: when a run builds its system
message, it reads the current public records and shows them after `text`. Agno builds the
system message once per run, so after every tool call the hook reads the records again and
replaces that block in the run's system message: the model's next call sees what is current.
The first gated call made from a model response stamps a plan whose parents are exactly the
records shown for that response; the other calls of the same response share it. Act side: the
fence is the hook (`Agent(tool_hooks=[fence])`) that wraps every tool call: it judges the call
and calls the tool only on an allow, with the allow's fencing token as
`planfence.fence.current()` and the lease its policy declares held until the tool returns. A
refusal does not call the tool: a stale plan raises `RetryAgentRun` with the refusal in words
(which records changed, their current values), and the model redoes the call from the records
now shown; a block raises `AgentRunException` with the refusal in words and its
`RefusalPayload` as JSON. Agno gives either to the model as the tool's error result.

Each run (its `run_id`) has its own plan chain. Sync runs (`agent.run`) and async ones
(`agent.arun`) both work: in an async tool chain the hook answers with a coroutine Agno awaits.
A store that cannot be reached while the records are shown or the plan is stamped is no
exception in the run: the model is told the records cannot be read, and its gated calls are
blocked as `store_unavailable`.
"""

from __future__ import annotations

import asyncio
import inspect
import json
import threading
from collections import OrderedDict
from collections.abc import Callable, Iterable, Mapping
from concurrent.futures import Future
from dataclasses import dataclass, field
from functools import partial
from typing import Any

from planfence.plugins.gate import (
    DEFAULT_AUDIT,
    AuditMode,
    Gate,
    Middleware,
    PlanStamper,
    Policy,
    Refused,
    ToolCall,
)
from planfence.plugins.gate.outage import PlanUnavailable
from planfence.shared_memory import AsyncStore, ConfigError, Record, Store, StoreBridge
from planfence.shared_memory.extras import extra_imports

from ..base import DEFAULT_HEADER, Adapter, read, reads_or_down, shown_text, stamp

with extra_imports("agno", "planfence.adapters.agno"):
    from agno.exceptions import AgentRunException, RetryAgentRun

Plan = str | PlanUnavailable | None
RUNS_KEPT = 256
"""How many runs' plan chains a fence keeps (the oldest go first)."""


@dataclass
class _Run:
    """One Agno run: its plan chain, the records its system message shows, its plan."""

    stamper: PlanStamper
    shown: list[Record] | PlanUnavailable
    block: str  # the records block as it stands in the system message
    planned_for: object = None  # the model response the plan was stamped for
    plan: Future[Plan] | None = None
    lock: threading.Lock = field(default_factory=threading.Lock)


class PlanfenceToolHook(Adapter):
    """Shows the records in the agent's instructions, stamps plans from them, and gates every
    tool call (`Agent(tool_hooks=[fence], instructions=fence.instructions(...))`).

    Args:
        store: the store: a `Store`, an `AsyncStore`, a URL or a `StoreBridge`.
        policy: the declared scopes (a `Policy`, its dict form, or TOML text).
        gate: a `Gate` configured beyond these settings (see `Adapter.attach_gate`).
        middleware: gate middleware, outermost first.
        audit: how the gate records its decisions (see `Adapter.attach_gate`).
        keys: keys whose current version the instructions show.
        prefixes: key prefixes shown the same way.
        agent: plans are stored under `plans/<agent>` and audited as it.
        header: the line above the records.
    """

    def __init__(
        self,
        store: AsyncStore | Store | StoreBridge | str,
        policy: Policy | Mapping[str, Any] | str,
        *,
        keys: Iterable[str] = (),
        prefixes: Iterable[str] = (),
        agent: str = "agent",
        gate: Gate | None = None,
        middleware: Iterable[Middleware] = (),
        audit: AuditMode = DEFAULT_AUDIT,
        header: str = DEFAULT_HEADER,
    ) -> None:
        self.attach_gate(store, policy, agent=agent, gate=gate, middleware=middleware, audit=audit)
        self.keys, self.prefixes, self.header = list(keys), list(prefixes), header
        self._runs: OrderedDict[str, _Run] = OrderedDict()
        self._lock = threading.Lock()

    # ---- read side: the records in the instructions, kept current in the system message

    def instructions(self, text: str = "") -> Callable[..., str]:
        """The agent's `instructions`: `text`, then the current records.

        Raises:
            ConfigError: (when a run builds its system message) the agent or team these
                instructions are given to does not have this fence in its `tool_hooks`: its
                tools would run without the gate, so the run stops before the model is called.
        """

        def show(run_context: Any = None, agent: Any = None) -> str:
            self._check_hooked(agent)
            if not (self.keys or self.prefixes) or run_context is None:
                return text
            stamper = self.new_stamper()
            shown = self.bridge.run(read, stamper, self.keys, self.prefixes)
            block = shown_text(self.header, shown)
            with self._lock:
                self._runs[str(run_context.run_id)] = _Run(stamper, shown, block)
                while len(self._runs) > RUNS_KEPT:
                    self._runs.popitem(last=False)
            return "\n\n".join(t for t in (text, block) if t)

        return show

    def _check_hooked(self, agent: Any) -> None:
        """Fail closed on the fence's instructions without its hook: Agno would call the tools
        directly, with no gate and no refusal."""
        if agent is None or any(h is self for h in getattr(agent, "tool_hooks", None) or ()):
            return
        raise ConfigError(
            f"{type(agent).__name__} {getattr(agent, 'name', None) or ''}".rstrip()
            + " has the planfence instructions but not the fence in its tool_hooks: its tools "
            "would run ungated. Give it tool_hooks=[fence] as well."
        )

    def _run(self, run_context: Any) -> _Run | None:
        with self._lock:
            return self._runs.get(str(getattr(run_context, "run_id", None)))

    def _shown_again(
        self, run: _Run, run_context: Any, shown: list[Record] | PlanUnavailable
    ) -> None:
        """Put `shown` in the run's system message in place of the block shown before."""
        block = shown_text(self.header, shown)
        for message in getattr(run_context, "messages", None) or ():
            content = message.content
            if message.role == "system" and isinstance(content, str) and run.block in content:
                message.content = content.replace(run.block, block)
                run.shown, run.block = shown, block
                return

    async def _arefresh(self, run: _Run | None, run_context: Any) -> None:
        if run is not None:
            try:
                shown = await read(run.stamper, self.keys, self.prefixes)
            except Exception as exc:  # whatever the read hit, the model is told it failed
                shown = PlanUnavailable.of(exc)
            self._shown_again(run, run_context, shown)

    def _refresh(self, run: _Run | None, run_context: Any) -> None:
        if run is not None:
            try:
                shown = self.bridge.run(read, run.stamper, self.keys, self.prefixes)
            except Exception as exc:
                shown = PlanUnavailable.of(exc)
            self._shown_again(run, run_context, shown)

    def _value(self, response: Any) -> dict[str, Any]:
        calls = getattr(response, "tool_calls", None) or []
        names = [c.get("function", {}).get("name") for c in calls if isinstance(c, dict)]
        return {"agent": self.agent, "tool_calls": names}

    def _planning(self, run: _Run, run_context: Any) -> tuple[Future[Plan], Callable[[], Any]]:
        """The plan of the model response whose calls run now, and, for the first of its calls
        (the one that stamps it), the stamp to run; later calls wait for the same plan."""
        response = _response(run_context)
        with run.lock:
            if run.planned_for is response and run.plan is not None:
                return run.plan, _nothing
            run.planned_for, run.plan = response, Future()
            reads, value = reads_or_down(run.shown), self._value(response)
            return run.plan, partial(stamp, run.stamper, reads, value=value)

    async def _aplan(self, run: _Run | None, run_context: Any) -> Plan:
        if run is None:
            return None
        plan, stamper = self._planning(run, run_context)
        if stamper is not _nothing:
            _settle(plan, await _outcome(stamper))
        return await asyncio.wrap_future(plan)

    def _plan(self, run: _Run | None, run_context: Any) -> Plan:
        if run is None:
            return None
        plan, stamper = self._planning(run, run_context)
        if stamper is not _nothing:
            _settle(plan, self.bridge.run(_outcome, stamper))
        return plan.result()

    # ---- act side: the hook around every tool call

    def __call__(
        self,
        function_name: str,
        function_call: Callable[..., Any],
        arguments: Mapping[str, Any],
        run_context: Any = None,
    ) -> Any:
        run = self._run(run_context)
        args = dict(arguments or {})
        if inspect.iscoroutinefunction(function_call):  # an async chain awaits what we return
            return self._acall(run, function_name, function_call, args, run_context)
        try:
            call = ToolCall(function_name, args, self._plan(run, run_context))
            with self.gate.guard_sync(call) as judged:
                if not isinstance(judged, Refused):
                    return function_call(**args)
            raise _refusal(judged)
        finally:
            self._refresh(run, run_context)

    async def _acall(
        self,
        run: _Run | None,
        name: str,
        function_call: Callable[..., Any],
        args: dict[str, Any],
        run_context: Any,
    ) -> Any:
        try:
            call = ToolCall(name, args, await self._aplan(run, run_context))
            async with self.gate.guard(call) as judged:
                if not isinstance(judged, Refused):
                    return await function_call(**args)
            raise _refusal(judged)
        finally:
            await self._arefresh(run, run_context)

    def close(self) -> None:
        """`aclose` from sync code (after `agent.run(...)`)."""
        self.bridge.run(self.gate.aclose)


async def _nothing() -> None:
    return None


async def _outcome(stamper: Callable[[], Any]) -> tuple[Plan, BaseException | None]:
    """The stamp's plan, or what it raised (for every call waiting on it)."""
    try:
        return await stamper(), None
    except Exception as exc:
        return None, exc


def _settle(plan: Future[Plan], outcome: tuple[Plan, BaseException | None]) -> None:
    value, error = outcome
    if error is not None:
        plan.set_exception(error)
    else:
        plan.set_result(value)


def _response(run_context: Any) -> object:
    """The model response whose tool calls run now: the run's latest assistant message."""
    for message in reversed(getattr(run_context, "messages", None) or ()):
        if message.role == "assistant":
            return message
    return None


def _refusal(judged: Refused) -> AgentRunException:
    """The refusal as Agno takes it from a tool: a replan asks the model to redo the call."""
    if judged.replan:
        return RetryAgentRun(judged.message)
    return AgentRunException(judged.message + "\n" + json.dumps(judged.payload.wire()))
